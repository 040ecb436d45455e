FROM jaegertracing/all-in-one:1.69.0
