// SPDX-License-Identifier: Apache-2.0
// joule::Exception → the Python class for its ErrorCode (joule._errors), with the same message.
#include <array>
#include <exception>
#include <string>

#include "bindings.hpp"

namespace joule::python {

namespace {

constexpr std::array kCodes = {ErrorCode::kInvalidArgument,
                               ErrorCode::kNotFound,
                               ErrorCode::kOutOfRange,
                               ErrorCode::kNotSupported,
                               ErrorCode::kPermissionDenied,
                               ErrorCode::kLibraryMissing,
                               ErrorCode::kParse,
                               ErrorCode::kIo,
                               ErrorCode::kState,
                               ErrorCode::kDevice,
                               ErrorCode::kInternal};

// One Python class per code, owned for the life of the process (the module is never unloaded).
std::array<PyObject*, kCodes.size()>& classes() {
  static std::array<PyObject*, kCodes.size()> table{};
  return table;
}

PyObject* class_for(ErrorCode code) {
  for (size_t i = 0; i < kCodes.size(); ++i) {
    if (kCodes[i] == code) {
      return classes()[i];
    }
  }
  return classes()[kCodes.size() - 1];
}

}  // namespace

void bind_errors(py::module_& module) {
  const py::module_ errors = py::module_::import("joule._errors");
  const py::dict by_code = errors.attr("CLASS_BY_CODE");
  for (size_t i = 0; i < kCodes.size(); ++i) {
    const std::string name(to_string(kCodes[i]));
    if (!by_code.contains(name)) {
      throw std::runtime_error("joule._errors.CLASS_BY_CODE lacks '" + name + "'");
    }
    classes()[i] = py::object(by_code[name.c_str()]).release().ptr();
  }
  py::register_exception_translator([](std::exception_ptr exception) {
    try {
      if (exception) {
        std::rethrow_exception(exception);
      }
    } catch (const Exception& error) {
      PyErr_SetString(class_for(error.code()), error.what());
    }
  });
  module.def(
      "_raise_error",
      [](const std::string& code, const std::string& message) {
        for (const ErrorCode candidate : kCodes) {
          if (to_string(candidate) == code) {
            throw Exception(candidate, message);
          }
        }
        throw Exception(ErrorCode::kInvalidArgument, "unknown error code '" + code + "'");
      },
      py::arg("code"), py::arg("message"),
      "Raises the joule.Error of `code` (e.g. 'not-found') from C++: for tests of the error mapping.");
}

}  // namespace joule::python
