// SPDX-License-Identifier: Apache-2.0
// Finds and loads joule's HTTP transport module (transport.hpp) once per process. The module is looked for
// only where this build put it or installed it, never on a search path a user's environment controls, and a
// file writable by others (or, in a root process, not root's own) is refused: a process that loads code
// must not let someone else choose it.
#include <climits>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include <dlfcn.h>
#include <fmt/format.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include "http/transport.hpp"

#ifndef JOULE_TRANSPORT_BUILD_ID
#error \
    "JOULE_TRANSPORT_BUILD_ID, JOULE_BUILD_DIR, JOULE_BUILD_MODULE_DIR, JOULE_INSTALL_MODULE_DIR and JOULE_MODULE_DIR_FROM_BINDIR come from src/http/CMakeLists.txt"
#endif

namespace joule::http::transport {

namespace {

// @return `path` with every symbolic link and "." / ".." resolved, or "" if it does not exist.
std::string real_path(const std::string& path) {
  char resolved[PATH_MAX];
  return ::realpath(path.c_str(), resolved) != nullptr ? std::string(resolved) : std::string();
}

std::string parent_folder(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".")
                                    : (slash == 0 ? std::string("/") : path.substr(0, slash));
}

// @return the file holding this code: the program, or the shared object (the Python module) it is linked
// into.
std::string this_object_path() {
  Dl_info info{};
  link_map* map = nullptr;
  if (dladdr1(reinterpret_cast<void*>(&this_object_path), &info, reinterpret_cast<void**>(&map),
              RTLD_DL_LINKMAP) != 0 &&
      map != nullptr && map->l_name != nullptr && map->l_name[0] != '\0') {
    return real_path(map->l_name);
  }
  return real_path("/proc/self/exe");  // the program itself (its link map has no name)
}

}  // namespace

std::vector<std::string> module_folders() {
  std::vector<std::string> folders;
  // (secure_getenv: not in a set-user-ID program.)
  if (const char* chosen = ::secure_getenv("JOULE_MODULE_DIR"); chosen != nullptr && *chosen != '\0') {
    folders.emplace_back(chosen);
  }
  const std::string object = this_object_path();
  const std::string build_dir = real_path(JOULE_BUILD_DIR);
  if (!object.empty() && !build_dir.empty() && object.rfind(build_dir + "/", 0) == 0) {
    folders.emplace_back(JOULE_BUILD_MODULE_DIR);  // the build tree: its own module, never an installed one
    return folders;
  }
  if (!object.empty()) {
    const std::string folder = parent_folder(object);
    folders.push_back(folder);                                                      // the Python package
    folders.push_back(fmt::format("{}/{}", folder, JOULE_MODULE_DIR_FROM_BINDIR));  // <prefix>/bin/joule
  }
  folders.emplace_back(JOULE_INSTALL_MODULE_DIR);  // a program linked with the installed libraries
  return folders;
}

namespace {

// @return why `path` may not be loaded, or "" if it may (it exists, no one else may write it, and in a root
// process it is root's).
std::string refuse_reason(const std::string& path) {
  struct stat status {};
  if (::stat(path.c_str(), &status) != 0) {
    return "not there";
  }
  if (!S_ISREG(status.st_mode)) {
    return "not a regular file";
  }
  if ((status.st_mode & S_IWOTH) != 0) {
    return "writable by every user: refused";
  }
  if (::geteuid() == 0 && (status.st_uid != 0 || (status.st_mode & S_IWGRP) != 0)) {
    return "not owned and only writable by root, and this process runs as root: refused";
  }
  return {};
}

}  // namespace

Result<const Api*> load_from(const std::vector<std::string>& folders) {
  std::vector<std::string> tried;
  for (const std::string& folder : folders) {
    const std::string path = fmt::format("{}/{}", folder, kModuleFileName);
    if (std::string reason = refuse_reason(path); !reason.empty()) {
      tried.push_back(fmt::format("{} ({})", path, reason));
      continue;
    }
    dlerror();
    // RTLD_LOCAL: cpp-httplib's and OpenSSL's symbols stay the module's.
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* reason = dlerror();
      tried.push_back(fmt::format("{} ({})", path, reason != nullptr ? reason : "cannot be loaded"));
      continue;
    }
    using EntryPoint = const Api* (*)();
    const auto entry = reinterpret_cast<EntryPoint>(::dlsym(handle, kEntryPoint));
    if (entry == nullptr) {
      tried.push_back(fmt::format("{} (has no {}: not joule's HTTP module)", path, kEntryPoint));
      ::dlclose(handle);
      continue;
    }
    const Api* api = entry();
    if (api == nullptr || api->build_id == nullptr ||
        std::string(api->build_id) != JOULE_TRANSPORT_BUILD_ID) {
      tried.push_back(
          fmt::format("{} (from another build of joule: {})", path,
                      api != nullptr && api->build_id != nullptr ? api->build_id : "no build id"));
      ::dlclose(handle);
      continue;
    }
    return api;  // the handle stays open: clients may live until exit
  }
  return fail(ErrorCode::kLibraryMissing,
              "joule's HTTP module ({}) could not be loaded, so no HTTP request can be sent; tried: {}. "
              "Reinstall joule (or rebuild it, in a build tree)",
              kModuleFileName, fmt::join(tried, "; "));
}

Result<const Api*> api() {
  static std::once_flag once;
  static Result<const Api*> loaded = tl::make_unexpected(Error(ErrorCode::kInternal, "not loaded"));
  std::call_once(once, [] { loaded = load_from(module_folders()); });
  return loaded;
}

}  // namespace joule::http::transport
