FROM postgres:16.9
