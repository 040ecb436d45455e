#!/bin/bash

set -ex

exec /ferretdb
