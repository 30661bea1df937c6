#!/bin/sh
# roots.sh PROFILES...: CPU samples by the function a goroutine started in (the frame under the goroutine's entry)
go tool pprof -traces "$@" 2>/dev/null | awk '/^-----/{if(n){print t"\t"prev2}; n=0; next} /^ +[0-9.]+m?s /{t=$1; prev=$2; prev2=$2; n=1; next} n&&NF{prev2=prev; prev=$1} END{}' | awk -F'\t' '{v=$1; if(v~/ms$/){sub(/ms/,"",v)} else {sub(/s/,"",v); v=v*1000}; s[$2]+=v; tot+=v} END{print tot"\tTOTAL"; for(k in s) print s[k]"\t"k}' | sort -rn | head -12
