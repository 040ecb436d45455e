FROM citusdata/citus:13.0
