// SPDX-License-Identifier: Apache-2.0
// A client of `joule daemon` run as a separate process by the daemon tests, to be another user (it drops
// to --uid/--gid first) or to be killed while it owns settings.
//
//   daemon_client_helper [--uid U --gid G] --socket PATH [--request JSON]… [--hold]
//     says hello, sends each request, prints each response line; with --hold, then prints "holding" and
//     waits to be killed.
//   daemon_client_helper [--uid U --gid G] --exec PROGRAM ARGS…
//     runs PROGRAM as that user.
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <grp.h>
#include <unistd.h>

#include "daemon/line_client.hpp"

namespace {

int usage(const char* why) {
  std::fprintf(stderr, "daemon_client_helper: %s\n", why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string socket_path;
  std::vector<std::string> requests;
  bool hold = false;
  long uid = -1;
  long gid = -1;
  int exec_at = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--exec") {
      exec_at = i + 1;
      break;
    }
    if (arg == "--hold") {
      hold = true;
    } else if (i + 1 < argc && arg == "--socket") {
      socket_path = argv[++i];
    } else if (i + 1 < argc && arg == "--request") {
      requests.emplace_back(argv[++i]);
    } else if (i + 1 < argc && arg == "--uid") {
      uid = std::stol(argv[++i]);
    } else if (i + 1 < argc && arg == "--gid") {
      gid = std::stol(argv[++i]);
    } else {
      return usage(("unknown argument " + arg).c_str());
    }
  }
  if (uid >= 0) {
    // Groups first, then gid, then uid: after setuid the process could no longer change the others.
    if (::setgroups(0, nullptr) != 0 || ::setgid(static_cast<gid_t>(gid >= 0 ? gid : uid)) != 0 ||
        ::setuid(static_cast<uid_t>(uid)) != 0) {
      std::fprintf(stderr, "daemon_client_helper: cannot become uid %ld: %s\n", uid, std::strerror(errno));
      return 3;
    }
  }
  if (exec_at > 0) {
    if (exec_at >= argc) {
      return usage("--exec needs a program");
    }
    ::execv(argv[exec_at], argv + exec_at);
    std::fprintf(stderr, "daemon_client_helper: cannot run %s: %s\n", argv[exec_at], std::strerror(errno));
    return 4;
  }
  if (socket_path.empty()) {
    return usage("--socket is required");
  }
  std::optional<joule::test::LineClient> client;
  try {
    client.emplace(socket_path, std::chrono::seconds(0));
  } catch (const std::runtime_error& error) {
    std::fprintf(stderr, "daemon_client_helper: %s\n", error.what());
    return 5;
  }
  requests.insert(requests.begin(), R"({"op":"hello","protocol":1,"client":"daemon_client_helper"})");
  for (const auto& request : requests) {
    std::string response;
    if (!client->send_all(request + "\n") || !client->try_read_line(response)) {
      std::fprintf(stderr, "daemon_client_helper: the daemon closed the connection\n");
      return 6;
    }
    std::printf("%s\n", response.c_str());
  }
  if (hold) {
    std::printf("holding\n");
    std::fflush(stdout);
    while (true) {
      ::pause();
    }
  }
  std::fflush(stdout);
  client->close();
  return 0;
}
