#!/bin/sh
# Regenerates the vulkan package's committed SPIR-V from its GLSL sources
# with glslc (Debian: apt-get install glslc). vulkan/shaders_test.go
# compiles them the same way and fails when a committed .spv differs, so
# change a .comp, run this, and commit both.
set -eu
cd "$(dirname "$0")/../vulkan/shaders"
for src in *.comp; do
	glslc --target-env=vulkan1.2 -O -o "${src%.comp}.spv" "$src"
done
