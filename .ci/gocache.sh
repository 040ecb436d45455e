# Build caches for mutants, sourced by .ci/mutants and .ci/gremlins.
#
# A mutant's build compiles its package and each package above it anew:
# tens to a couple of hundred megabytes that no later build can use. Left in
# the user's build cache, a whole .ci/run added tens of gigabytes, and a CI
# run once ran out of disk that way (stop 36). So mutants build in caches of
# their own made of hard links to the user's: what they share costs no
# space, and what a mutant adds (the files with a single link) is deleted.
#
# The caches live in one directory beside the user's (hard links need the
# same file system), locked for as long as the script runs. A later run
# removes the directories of runs that were killed (their lock is free).
# Where no hard link can be made (the user's cache is a mount point of its
# own, or its parent is read-only), the mutants build in the user's cache as
# they did before, and say so.

# gocache_scratch PREFIX makes that directory (GOCACHE_SCRATCH; empty where
# none can be made) and sets GOCACHE_USER to the user's cache, its real
# path. The lock is file descriptor 9 of the calling shell.
gocache_scratch() {
  local prefix=$1 parent d
  GOCACHE_SCRATCH=
  GOCACHE_USER=$(go env GOCACHE)
  mkdir -p "$GOCACHE_USER" 2>/dev/null || true
  GOCACHE_USER=$(cd "$GOCACHE_USER" 2>/dev/null && pwd -P) || {
    GOCACHE_USER=
    return 0
  }
  parent=$(dirname "$GOCACHE_USER")
  for d in "$parent/.turnpike-"*; do
    if [ -d "$d" ] && [ -e "$d/.lock" ]; then
      (flock -n 8 && rm -rf "$d") 8<"$d/.lock" 2>/dev/null || true
    fi
  done
  GOCACHE_SCRATCH=$(mktemp -d -p "$parent" ".turnpike-$prefix.XXXXXX" 2>/dev/null) || GOCACHE_SCRATCH=
  if [ -n "$GOCACHE_SCRATCH" ]; then
    exec 9>"$GOCACHE_SCRATCH/.lock"
    flock -n 9 || GOCACHE_SCRATCH=
  fi
  if [ -z "$GOCACHE_SCRATCH" ]; then
    echo "$prefix: the mutants build in the user's cache: no directory beside it ($parent)" >&2
  elif [ "$(stat -c %d "$GOCACHE_USER")" != "$(stat -c %d "$GOCACHE_SCRATCH")" ]; then
    echo "$prefix: the mutants build in the user's cache: $GOCACHE_USER is on a file system of its own" >&2
    rm -rf "$GOCACHE_SCRATCH"
    GOCACHE_SCRATCH=
  fi
}

# gocache_link NAME makes GOCACHE_SCRATCH/NAME a cache of hard links to the
# user's, but for the few files go rewrites in place (trim.txt and the
# like), which are its own copies, and prints its path. It prints nothing
# without GOCACHE_SCRATCH. A file go deletes from the user's cache during
# the copy is only missing from this one.
gocache_link() {
  local c f
  [ -n "$GOCACHE_SCRATCH" ] || return 0
  c=$GOCACHE_SCRATCH/$1
  rm -rf "$c"
  mkdir "$c" || return 0
  cp -al "$GOCACHE_USER/." "$c/" 2>/dev/null || true
  for f in "$c"/*; do
    if [ -f "$f" ]; then
      cp --remove-destination "$GOCACHE_USER/${f##*/}" "$f" 2>/dev/null || rm -f "$f"
    fi
  done
  echo "$c"
}

# gocache_drop_new CACHE deletes what builds added to CACHE, a cache
# gocache_link made: the files of its entries with a single link.
gocache_drop_new() {
  case $1 in
  "$GOCACHE_SCRATCH"/?*) find "$1"/[0-9a-f][0-9a-f] -type f -links 1 -delete 2>/dev/null || true ;;
  *) echo "gocache_drop_new: $1 is not a linked cache" >&2 && return 1 ;;
  esac
}
