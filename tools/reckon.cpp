// The `reckon` command line.
#include <CLI/CLI.hpp>
#include <cstdio>

int main(int argc, char** argv) {
  CLI::App app{"reckon: train convolutional networks and know what they cost"};
  CLI11_PARSE(app, argc, argv);
  return 0;
}
