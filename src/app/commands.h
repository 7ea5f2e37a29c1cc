// The subcommands of the tollgate binary. Each returns the process exit code: 0 ok, 2 bad usage
// or config (with a message naming the flag, or the file, line and key), 1 other failure.
#pragma once

namespace tollgate::app {

int run_main(int argc, char** argv);
int run_serve(int argc, char** argv);
int run_stdio(int argc, char** argv);
/// `tollgate config check --config FILE`.
int run_config(int argc, char** argv);

}  // namespace tollgate::app
