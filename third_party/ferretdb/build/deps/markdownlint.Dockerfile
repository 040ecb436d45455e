FROM davidanson/markdownlint-cli2:v0.13.0
