FROM ghcr.io/ferretdb/ferretdb-textlint:14.7.1-1
