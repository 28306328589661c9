// SPDX-License-Identifier: Apache-2.0
#include "joule/http/tls.hpp"

#include <cerrno>
#include <stdexcept>
#include <utility>

#include "http/transport.hpp"

namespace joule::http {

namespace {

const transport::TlsApi& tls_api(const void* api) {
  return *static_cast<const transport::TlsApi*>(api);
}

// OpenSSL's words for a certificate the peer or this end refused.
bool is_certificate_refusal(const std::string& error) {
  return error.find("certificate") != std::string::npos || error.find("unknown ca") != std::string::npos ||
         error.find("alert bad") != std::string::npos || error.find("access denied") != std::string::npos;
}

Result<TlsWait> wait_or_fail(transport::TlsStep step, const std::string& error, std::string_view what) {
  switch (step) {
    case transport::TlsStep::kDone:
      return TlsWait::kNothing;
    case transport::TlsStep::kWantRead:
      return TlsWait::kReadable;
    case transport::TlsStep::kWantWrite:
      return TlsWait::kWritable;
    case transport::TlsStep::kClosed:
      return fail(ErrorCode::kIo, "TLS {}: the peer closed the connection", what);
    case transport::TlsStep::kFailed:
      break;
  }
  return fail(is_certificate_refusal(error) ? ErrorCode::kPermissionDenied : ErrorCode::kIo, "TLS {}: {}",
              what, error);
}

}  // namespace

TlsContext::TlsContext(const void* api, void* handle, bool server, bool asks_client_certificate)
    : api_(api), handle_(handle), server_(server), asks_client_certificate_(asks_client_certificate) {}

TlsContext::~TlsContext() {
  tls_api(api_).free_context(handle_);
}

Result<std::shared_ptr<TlsContext>> TlsContext::make(bool server, const TlsContextFiles& files) {
  const auto* module = JOULE_TRY(transport::api());
  const transport::TlsApi* api = module->tls();
  std::string error;
  const transport::TlsFiles module_files{files.certificate_file, files.private_key_file, files.ca_file};
  void* handle = api->new_context(server, module_files, error);
  if (handle == nullptr) {
    return fail(ErrorCode::kInvalidArgument, "{}", error);
  }
  return std::shared_ptr<TlsContext>(new TlsContext(api, handle, server, server && !files.ca_file.empty()));
}

Result<std::shared_ptr<TlsContext>> TlsContext::server(const TlsContextFiles& files) {
  return make(true, files);
}

Result<std::shared_ptr<TlsContext>> TlsContext::client(const TlsContextFiles& files) {
  return make(false, files);
}

TlsStream::TlsStream(std::shared_ptr<const TlsContext> context, void* handle)
    : context_(std::move(context)), handle_(handle) {}

TlsStream::~TlsStream() {
  tls_api(context_->api_).free_session(handle_);
}

Result<std::unique_ptr<TlsStream>> TlsStream::server(std::shared_ptr<const TlsContext> context, int fd) {
  if (!context->is_server()) {
    throw std::logic_error("TlsStream::server needs a server context");
  }
  std::string error;
  void* handle = tls_api(context->api_).new_session(context->handle_, fd, true, {}, error);
  if (handle == nullptr) {
    return fail(ErrorCode::kIo, "{}", error);
  }
  return std::unique_ptr<TlsStream>(new TlsStream(std::move(context), handle));
}

Result<std::unique_ptr<TlsStream>> TlsStream::client(std::shared_ptr<const TlsContext> context, int fd,
                                                     const std::string& host) {
  if (context->is_server()) {
    throw std::logic_error("TlsStream::client needs a client context");
  }
  std::string error;
  void* handle = tls_api(context->api_).new_session(context->handle_, fd, false, host, error);
  if (handle == nullptr) {
    return fail(ErrorCode::kIo, "{}", error);
  }
  return std::unique_ptr<TlsStream>(new TlsStream(std::move(context), handle));
}

Result<TlsWait> TlsStream::handshake() {
  if (established_) {
    return TlsWait::kNothing;
  }
  std::string error;
  const auto step = tls_api(context_->api_).handshake(handle_, error);
  closed_before_handshake_ = step == transport::TlsStep::kClosed;
  auto wait = JOULE_TRY(wait_or_fail(step, error, "handshake"));
  established_ = wait == TlsWait::kNothing;
  return wait;
}

Result<TlsIo> TlsStream::read(char* buffer, size_t size) {
  std::string error;
  TlsIo io;
  const auto step = tls_api(context_->api_).read(handle_, buffer, size, io.bytes, error);
  if (step == transport::TlsStep::kClosed) {
    io.closed = true;
    return io;
  }
  io.wait = JOULE_TRY(wait_or_fail(step, error, "read"));
  return io;
}

Result<TlsIo> TlsStream::write(const char* data, size_t size) {
  std::string error;
  TlsIo io;
  const auto step = tls_api(context_->api_).write(handle_, data, size, io.bytes, error);
  if (step == transport::TlsStep::kClosed) {
    io.closed = true;
    return io;
  }
  io.wait = JOULE_TRY(wait_or_fail(step, error, "write"));
  return io;
}

ssize_t TlsStream::as_posix(const Result<TlsIo>& io, bool reading) {
  if (!io || (io->closed && !reading)) {
    last_error_ = io ? std::string("the peer closed the TLS session") : io.error().message();
    errno = EPROTO;
    return -1;
  }
  if (io->closed) {
    return 0;
  }
  if (io->wait != TlsWait::kNothing) {
    waits_for_writable_ = io->wait == TlsWait::kWritable;
    errno = EAGAIN;
    return -1;
  }
  return static_cast<ssize_t>(io->bytes);
}

ssize_t TlsStream::receive(char* buffer, size_t size) {
  return as_posix(read(buffer, size), true);
}

ssize_t TlsStream::send(const char* data, size_t size) {
  return as_posix(write(data, size), false);
}

size_t TlsStream::pending() const {
  return tls_api(context_->api_).pending(handle_);
}

std::string TlsStream::peer_name() const {
  return tls_api(context_->api_).peer_name(handle_);
}

void TlsStream::shutdown() {
  tls_api(context_->api_).shutdown(handle_);
}

}  // namespace joule::http
