FROM ghcr.io/ferretdb/ferretdb-wrangler:4.7.1-1
