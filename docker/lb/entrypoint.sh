#!/bin/sh
# Write nginx's config from RLVR_LB_LISTEN and RLVR_LB_UPSTREAMS, then run nginx in the foreground.
set -eu
conf=/tmp/nginx/nginx.conf
mkdir -p /tmp/nginx
servers=""
for upstream in $RLVR_LB_UPSTREAMS; do
    # A replica that fails is skipped for 5 s, then tried again.
    servers="$servers        server $upstream max_fails=1 fail_timeout=5s;\n"
done
[ -n "$servers" ] || { echo "RLVR_LB_UPSTREAMS names no replica" >&2; exit 1; }
sed -e "s|@LISTEN@|$RLVR_LB_LISTEN|" -e "s|@SERVERS@|$servers|" /opt/rlvr-lb/nginx.conf.template >"$conf"
nginx -t -q -c "$conf"
echo "rlvr-lb: $RLVR_LB_LISTEN -> $RLVR_LB_UPSTREAMS"
exec nginx -c "$conf" -g "daemon off;"
