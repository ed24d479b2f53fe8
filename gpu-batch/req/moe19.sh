#!/usr/bin/env bash
exec bash bench/gpu_request_moe19.sh "$@"
