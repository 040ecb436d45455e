//go:build ferretdb_debug

package debugbuild

const tagged = true
