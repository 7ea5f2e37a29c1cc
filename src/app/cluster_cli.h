// Cluster mode in the app: [cluster] settings for the cluster module, and the `tollgate cluster`
// command (import, status).
#pragma once

#include <cstdio>
#include <span>
#include <string>
#include <string_view>

#include "tollgate/cluster/cluster.h"
#include "tollgate/common/result.h"
#include "tollgate/config/config.h"

namespace tollgate::app {

/// The cluster module's settings from [cluster]: the password read from password_env (an unset
/// or empty variable is an error naming it), the node name defaulting to `default_node`.
result<cluster::settings, std::string> cluster_settings(const config::settings& s,
                                                        std::string default_node);

/// `tollgate cluster import --config FILE --data-dir DIR | status --config FILE [--json]`.
int run_cluster(std::span<const std::string_view> args, std::FILE* out, std::FILE* err);
/// The options `cluster` takes (each listed by its help text), and the help text.
std::span<const std::string_view> cluster_options();
std::string_view cluster_help();

}  // namespace tollgate::app
