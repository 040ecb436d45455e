FROM aquasec/trivy:0.62.1
WORKDIR /workdir
