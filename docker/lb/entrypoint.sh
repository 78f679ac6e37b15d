#!/bin/sh
# Write nginx's config from RLVR_LB_LISTEN and RLVR_LB_UPSTREAMS, then run nginx in the foreground.
set -eu
conf=/tmp/nginx/nginx.conf
mkdir -p /tmp/nginx
servers=""
for upstream in $RLVR_LB_UPSTREAMS; do
    # max_fails=0: a replica is never marked down. nginx counts a 429 (a full queue, which proxy_next_upstream
    # retries elsewhere) as a failure, and with every replica marked down it would answer 502 itself. A replica
    # that is down refuses the connection at once, and the request moves on to the next.
    servers="$servers        server $upstream max_fails=0;\n"
done
[ -n "$servers" ] || { echo "RLVR_LB_UPSTREAMS names no replica" >&2; exit 1; }
sed -e "s|@LISTEN@|$RLVR_LB_LISTEN|" -e "s|@SERVERS@|$servers|" /opt/rlvr-lb/nginx.conf.template >"$conf"
nginx -t -q -c "$conf"
echo "rlvr-lb: $RLVR_LB_LISTEN -> $RLVR_LB_UPSTREAMS"
exec nginx -c "$conf" -g "daemon off;"
