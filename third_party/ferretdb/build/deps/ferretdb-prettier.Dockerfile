FROM ghcr.io/ferretdb/ferretdb-prettier:3.5.3-1
