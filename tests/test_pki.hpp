// SPDX-License-Identifier: Apache-2.0
// A throwaway public-key infrastructure for tests of TLS (the daemon's network listener and its clients):
// certificate authorities and certificates they sign, made with OpenSSL's API in a fresh folder, valid for
// the window a test asks (an expired one too). No key lives in the repository, so none can expire there.
// Link ssl and crypto.
#pragma once

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

namespace joule::testing {

class TestPki {
 public:
  struct Files {
    std::string certificate;
    std::string key;
  };

  explicit TestPki(const std::string& tag) {
    folder_ = std::filesystem::temp_directory_path() /
              ("joule-pki-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(serial_seed()));
    std::filesystem::remove_all(folder_);
    std::filesystem::create_directories(folder_);
  }
  ~TestPki() {
    std::error_code ignored;
    std::filesystem::remove_all(folder_, ignored);
  }
  TestPki(const TestPki&) = delete;
  TestPki& operator=(const TestPki&) = delete;

  const std::filesystem::path& folder() const { return folder_; }

  /// A self-signed authority called `name` (files name.pem, name.key).
  Files authority(const std::string& name) {
    Key key(EVP_EC_gen("P-256"), EVP_PKEY_free);
    Certificate certificate = make(name, key.get(), -60, 86400);
    X509_set_issuer_name(certificate.get(), X509_get_subject_name(certificate.get()));
    add_extension(certificate.get(), certificate.get(), NID_basic_constraints, "critical,CA:TRUE");
    add_extension(certificate.get(), certificate.get(), NID_key_usage, "critical,keyCertSign,cRLSign");
    X509_sign(certificate.get(), key.get(), EVP_sha256());
    Files files = write(name, certificate.get(), key.get());
    authorities_.emplace(name, Authority{std::move(key), std::move(certificate)});
    return files;
  }

  /// A certificate for `common_name` signed by `authority`, with `alt_names` as subjectAltName entries
  /// ("IP:127.0.0.2", "DNS:localhost"), valid from now + `from_s` to now + `to_s` (both may be negative).
  Files issue(const std::string& authority, const std::string& file_name, const std::string& common_name,
              const std::vector<std::string>& alt_names = {}, long from_s = -60, long to_s = 86400) {
    const auto found = authorities_.find(authority);
    if (found == authorities_.end()) {
      throw std::logic_error("no authority " + authority);
    }
    Key key(EVP_EC_gen("P-256"), EVP_PKEY_free);
    Certificate certificate = make(common_name, key.get(), from_s, to_s);
    X509_set_issuer_name(certificate.get(), X509_get_subject_name(found->second.certificate.get()));
    if (!alt_names.empty()) {
      std::string list;
      for (const auto& name : alt_names) {
        list += (list.empty() ? "" : ",") + name;
      }
      add_extension(certificate.get(), found->second.certificate.get(), NID_subject_alt_name, list);
    }
    X509_sign(certificate.get(), found->second.key.get(), EVP_sha256());
    return write(file_name, certificate.get(), key.get());
  }

 private:
  using Key = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
  using Certificate = std::unique_ptr<X509, decltype(&X509_free)>;
  struct Authority {
    Key key;
    Certificate certificate;
  };

  static long serial_seed() {
    static long next = 0;
    return ++next;
  }

  Certificate make(const std::string& common_name, EVP_PKEY* key, long from_s, long to_s) {
    Certificate certificate(X509_new(), X509_free);
    if (key == nullptr || !certificate) {
      throw std::runtime_error("cannot make a key or a certificate");
    }
    X509_set_version(certificate.get(), 2);
    ASN1_INTEGER_set(X509_get_serialNumber(certificate.get()), ++serial_);
    X509_gmtime_adj(X509_getm_notBefore(certificate.get()), from_s);
    X509_gmtime_adj(X509_getm_notAfter(certificate.get()), to_s);
    X509_set_pubkey(certificate.get(), key);
    X509_NAME_add_entry_by_txt(X509_get_subject_name(certificate.get()), "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1, 0);
    return certificate;
  }

  static void add_extension(X509* certificate, X509* issuer, int nid, const std::string& value) {
    X509V3_CTX context;
    X509V3_set_ctx_nodb(&context);
    X509V3_set_ctx(&context, issuer, certificate, nullptr, nullptr, 0);
    X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &context, nid, value.c_str());
    if (extension == nullptr) {
      throw std::runtime_error("bad extension " + value);
    }
    X509_add_ext(certificate, extension, -1);
    X509_EXTENSION_free(extension);
  }

  Files write(const std::string& name, X509* certificate, EVP_PKEY* key) {
    Files files{(folder_ / (name + ".pem")).string(), (folder_ / (name + ".key")).string()};
    FILE* certificate_file = std::fopen(files.certificate.c_str(), "w");
    FILE* key_file = std::fopen(files.key.c_str(), "w");
    if (certificate_file == nullptr || key_file == nullptr) {
      throw std::runtime_error("cannot write in " + folder_.string());
    }
    PEM_write_X509(certificate_file, certificate);
    PEM_write_PrivateKey(key_file, key, nullptr, nullptr, 0, nullptr, nullptr);
    std::fclose(certificate_file);
    std::fclose(key_file);
    std::filesystem::permissions(files.key,
                                 std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    return files;
  }

  std::filesystem::path folder_;
  std::map<std::string, Authority> authorities_;
  long serial_ = 0;
};

}  // namespace joule::testing
