// SPDX-License-Identifier: Apache-2.0
// The libpq boundary (src/store/libpq.hpp): libpq is dlopened when a postgresql:// store is opened, with a
// clear error when it is absent.
#include "store/libpq.hpp"

#include <cstdlib>

#include <gtest/gtest.h>

namespace joule::store::pg {
namespace {

TEST(LoadLibpq, AbsentLibraryIsLibraryMissingAndSaysWhatToDo) {
  const auto loaded = load_libpq("/nonexistent/libpq.so.5");
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().code(), ErrorCode::kLibraryMissing);
  const std::string& message = loaded.error().message();
  EXPECT_NE(message.find("cannot load the PostgreSQL client library"), std::string::npos) << message;
  EXPECT_NE(message.find("/nonexistent/libpq.so.5"), std::string::npos) << message;
  EXPECT_NE(message.find("libpq5"), std::string::npos) << message;
  EXPECT_NE(message.find("JOULE_LIBPQ_LIBRARY"), std::string::npos) << message;
  EXPECT_NE(message.find("sqlite:"), std::string::npos) << message;
}

TEST(LoadLibpq, LibraryWithoutLibpqsFunctionsIsRefused) {
  const auto loaded = load_libpq("libm.so.6");
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().code(), ErrorCode::kLibraryMissing);
  EXPECT_NE(loaded.error().message().find("lacks the function PQconnectdbParams"), std::string::npos)
      << loaded.error().message();
}

TEST(LoadLibpq, TheInstalledLibraryResolvesEveryFunction) {
  const auto loaded = load_libpq("libpq.so.5");
  ASSERT_TRUE(loaded) << loaded.error().message();
  EXPECT_NE(loaded->connectdb_params, nullptr);
  EXPECT_NE(loaded->freemem, nullptr);
  const auto process = libpq();
  ASSERT_TRUE(process) << process.error().message();
  EXPECT_EQ(*process, *libpq());  // loaded once
}

TEST(LoadLibpq, LibraryNameHonoursTheEnvironment) {
  ::unsetenv("JOULE_LIBPQ_LIBRARY");
  EXPECT_EQ(libpq_library_name(), "libpq.so.5");
  ::setenv("JOULE_LIBPQ_LIBRARY", "", 1);
  EXPECT_EQ(libpq_library_name(), "libpq.so.5");
  ::setenv("JOULE_LIBPQ_LIBRARY", "/opt/pg/lib/libpq.so.5", 1);
  EXPECT_EQ(libpq_library_name(), "/opt/pg/lib/libpq.so.5");
  ::unsetenv("JOULE_LIBPQ_LIBRARY");
}

}  // namespace
}  // namespace joule::store::pg
