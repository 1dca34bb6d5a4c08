#!/bin/sh
# 07: an artifact's gzip-encoded and identity responses carry the same strong ETag.
# Usage: sh 07_etag_gzip.sh BASE_URL
B=${1:-http://127.0.0.1:8080}
KEY=$(curl -s "$B/v1/compile" -H 'content-type: application/json' -d '{"source":"int main() { return 1; }","emit":["header"]}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
echo "--- Accept-Encoding: gzip"
curl -s -o /dev/null -D - -H 'Accept-Encoding: gzip' "$B/v1/artifacts/$KEY/header" | grep -i '^etag\|^content-encoding'
echo "--- identity"
curl -s -o /dev/null -D - "$B/v1/artifacts/$KEY/header" | grep -i '^etag\|^content-encoding\|^content-length'
