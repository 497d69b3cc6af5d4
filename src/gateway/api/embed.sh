#!/bin/sh
# embed.sh FILE SYMBOL: a C file defining SYMBOL (bytes of FILE, NUL-terminated)
# and SYMBOL_len, so the status page ships inside the binary.
set -eu
echo "/* Generated from $(basename "$1") by embed.sh; do not edit. */"
echo "#include <stddef.h>"
echo "const unsigned char $2[] = {"
od -An -v -tx1 "$1" | sed -e 's/[0-9a-f][0-9a-f]/0x&,/g' -e 's/^ *//'
echo "0x00};"
echo "const size_t $2_len = sizeof($2) - 1;"
