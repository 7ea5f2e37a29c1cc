// The fleet: shard nodes. A gateway's backend has its in-process index slices (slots 0..L-1)
// and R remote shard nodes (slots L..L+R-1): other tollgate processes started with --role shard,
// reached over HTTP/1.1. What is protocol and search logic lives in src/search, free of sockets;
// the app moves the bytes with the engine's outbound client (http::engine_io::fetch). One header
// per concern, calls pointing one way:
//   fleet_wire.h     the wire format (paths, secret header, the story request-target) and the
//                    two-phase protocol; read by both sides.
//   shard_node.h     node side: serve_fleet_request() answers one request against the node's
//                    backend (called by app/shard_handler).
//   remote_query.h   gateway side: one query's fan-out state; writes the request bodies, takes
//                    the answers and computes the global idf (driven by app/fleet_client, read
//                    by backend::search).
//   remote_health.h  gateway side: down-marking of failing nodes, shared by a gateway's cores.
// This header includes all four.
#pragma once

#include "tollgate/search/fleet_wire.h"
#include "tollgate/search/remote_health.h"
#include "tollgate/search/remote_query.h"
#include "tollgate/search/shard_node.h"
