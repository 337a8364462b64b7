#!/bin/bash
# Entrypoint of the local cluster's stand-in for a third-party PostgreSQL 15 image (Debian bookworm packages).
#
# It keeps the contract of the official postgres image's docker-entrypoint.sh that pgpilot's
# StatefulSet relies on: with `postgres ARGS...` as the command and PGDATA, POSTGRES_USER and
# POSTGRES_PASSWORD in the environment, it runs initdb when PGDATA holds no database, appends
# `host all all all <password_encryption>` to PGDATA's pg_hba.conf, creates POSTGRES_DB, runs
# /docker-entrypoint-initdb.d/*.{sh,sql,sql.gz} against a socket-only temporary server started
# with the same ARGS, and finally execs the command. *_FILE variants of the variables work too.
set -Eeo pipefail

# file_env VAR [DEFAULT]: VAR from the environment, or from the file named by VAR_FILE.
file_env() {
  local var=$1 file_var="${1}_FILE" default=${2:-}
  if [[ -n ${!var:-} && -n ${!file_var:-} ]]; then
    echo >&2 "error: both $var and $file_var are set (but are exclusive)"
    exit 1
  fi
  local value=$default
  if [[ -n ${!var:-} ]]; then
    value=${!var}
  elif [[ -n ${!file_var:-} ]]; then
    value=$(<"${!file_var}")
  fi
  export "$var"="$value"
  unset "$file_var"
}

setup_env() {
  file_env POSTGRES_PASSWORD
  file_env POSTGRES_USER postgres
  file_env POSTGRES_DB "$POSTGRES_USER"
  file_env POSTGRES_INITDB_ARGS
  : "${POSTGRES_HOST_AUTH_METHOD:=}"
  DATABASE_ALREADY_EXISTS=
  [[ -s $PGDATA/PG_VERSION ]] && DATABASE_ALREADY_EXISTS=true
  return 0
}

create_directories() {
  local user
  user=$(id -u)
  mkdir -p "$PGDATA" || :
  chmod 00700 "$PGDATA" || :
  mkdir -p /var/run/postgresql || :
  chmod 03775 /var/run/postgresql || :
  if [[ -n ${POSTGRES_INITDB_WALDIR:-} ]]; then
    mkdir -p "$POSTGRES_INITDB_WALDIR" || :
    [[ $user == 0 ]] && find "$POSTGRES_INITDB_WALDIR" \! -user postgres -exec chown postgres '{}' +
    chmod 700 "$POSTGRES_INITDB_WALDIR" || :
  fi
  if [[ $user == 0 ]]; then
    find "$PGDATA" \! -user postgres -exec chown postgres '{}' +
    find /var/run/postgresql \! -user postgres -exec chown postgres '{}' +
  fi
}

verify_minimum_env() {
  if [[ -z $POSTGRES_PASSWORD && $POSTGRES_HOST_AUTH_METHOD != trust ]]; then
    cat >&2 <<-'EOM'
	Error: Database is uninitialized and superuser password is not specified.
	       Set POSTGRES_PASSWORD to a non-empty value for the superuser, or set
	       POSTGRES_HOST_AUTH_METHOD=trust to allow all connections without a password.
	EOM
    exit 1
  fi
}

init_database_dir() {
  if [[ -n ${POSTGRES_INITDB_WALDIR:-} ]]; then
    set -- --waldir "$POSTGRES_INITDB_WALDIR" "$@"
  fi
  # POSTGRES_INITDB_ARGS is a list of words, as in the official image: split on blanks (no globbing).
  local initdb_args=()
  read -r -d '' -a initdb_args <<<"$POSTGRES_INITDB_ARGS" || :
  initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
    "${initdb_args[@]}" "$@"
}

# setup_hba_conf ARGS: allow password logins from anywhere, with the server's own encryption.
setup_hba_conf() {
  [[ ${1:-} == postgres ]] && shift
  local auth
  auth=$(postgres -C password_encryption "$@")
  : "${POSTGRES_HOST_AUTH_METHOD:=$auth}"
  printf '\nhost all all all %s\n' "$POSTGRES_HOST_AUTH_METHOD" >>"$PGDATA/pg_hba.conf"
}

process_sql() {
  local runner=(psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc)
  [[ -n $POSTGRES_DB ]] && runner+=(--dbname "$POSTGRES_DB")
  PGHOST='' PGHOSTADDR='' "${runner[@]}" "$@"
}

temp_server_start() {
  [[ ${1:-} == postgres ]] && shift
  set -- "$@" -c listen_addresses='' -p "${PGPORT:-5432}"
  PGUSER="${PGUSER:-$POSTGRES_USER}" pg_ctl -D "$PGDATA" -o "$(printf '%q ' "$@")" -w start
}

temp_server_stop() { PGUSER="${PGUSER:-postgres}" pg_ctl -D "$PGDATA" -m fast -w stop; }

# POSTGRES_DB='' for the runner, the real name as the psql variable, as in the official image.
setup_db() {
  local db=$POSTGRES_DB exists
  exists=$(POSTGRES_DB='' process_sql --dbname postgres --set db="$db" --tuples-only \
    <<<"SELECT 1 FROM pg_database WHERE datname = :'db';")
  if [[ -z ${exists// /} ]]; then
    POSTGRES_DB='' process_sql --dbname postgres --set db="$db" <<<'CREATE DATABASE :"db";'
  fi
}

# shellcheck disable=SC1090 # sources the user's scripts
process_init_files() {
  local f
  for f in "$@"; do
    case "$f" in
      *.sh) echo "running $f"; if [[ -x $f ]]; then "$f"; else . "$f"; fi ;;
      *.sql) echo "running $f"; process_sql -f "$f" ;;
      *.sql.gz) echo "running $f"; gunzip -c "$f" | process_sql ;;
      *) if [[ -e $f ]]; then echo "ignoring $f"; fi ;;
    esac
  done
}

# want_help ARGS: postgres only prints something and exits; no initialisation wanted.
want_help() {
  local arg
  for arg; do
    case "$arg" in -'?' | --help | --describe-config | -V | --version) return 0 ;; esac
  done
  return 1
}

main() {
  [[ ${1:0:1} == - ]] && set -- postgres "$@"
  if [[ ${1:-} == postgres ]] && ! want_help "$@"; then
    setup_env
    create_directories
    if [[ $(id -u) == 0 ]]; then
      # The official image steps down with gosu; util-linux's setpriv does the same.
      exec setpriv --reuid=postgres --regid=postgres --init-groups "${BASH_SOURCE[0]}" "$@"
    fi
    if [[ -z $DATABASE_ALREADY_EXISTS ]]; then
      verify_minimum_env
      ls /docker-entrypoint-initdb.d/ >/dev/null
      init_database_dir
      setup_hba_conf "$@"
      export PGPASSWORD="${PGPASSWORD:-$POSTGRES_PASSWORD}"
      temp_server_start "$@"
      setup_db
      process_init_files /docker-entrypoint-initdb.d/*
      temp_server_stop
      unset PGPASSWORD
      echo 'PostgreSQL init process complete; ready for start up.'
    else
      echo 'PostgreSQL Database directory appears to contain a database; Skipping initialization'
    fi
  fi
  exec "$@"
}

main "$@"
