FROM ghcr.io/ferretdb/docusaurus-docs:3.7.0-4
