#include "daemon/tls_context.h"

#include <openssl/ssl.h>

#include <utility>

namespace kbox {
namespace ssl = boost::asio::ssl;

namespace {

boost::system::result<std::shared_ptr<ssl::context>, std::string> LoadContext(
    const std::string& cert_file, const std::string& key_file) {
  auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
  boost::system::error_code ec;
  // No SSLv2/3, TLS 1.0 or 1.1, no compression, a fresh key per handshake.
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                           ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                           ssl::context::no_tlsv1_1 | ssl::context::no_compression |
                           ssl::context::single_dh_use,
                       ec);
  if (!ec && SSL_CTX_set_min_proto_version(context->native_handle(), TLS1_2_VERSION) != 1) {
    return std::string("cannot require TLS 1.2");
  }
  if (ec) return "cannot set TLS options: " + ec.message();
  context->use_certificate_chain_file(cert_file, ec);
  if (ec) return "tls_cert_file " + cert_file + ": " + ec.message();
  context->use_private_key_file(key_file, ssl::context::pem, ec);
  if (ec) return "tls_key_file " + key_file + ": " + ec.message();
  if (SSL_CTX_check_private_key(context->native_handle()) != 1) {
    return "tls_key_file " + key_file + " does not match the certificate in " + cert_file;
  }
  return context;
}

}  // namespace

TlsContext::TlsContext(std::string cert_file, std::string key_file,
                       std::shared_ptr<ssl::context> context)
    : cert_file_(std::move(cert_file)),
      key_file_(std::move(key_file)),
      context_(std::move(context)) {}

boost::system::result<std::unique_ptr<TlsContext>, std::string> TlsContext::Open(
    std::string cert_file, std::string key_file) {
  auto context = LoadContext(cert_file, key_file);
  if (!context) return context.error();
  return std::unique_ptr<TlsContext>(
      new TlsContext(std::move(cert_file), std::move(key_file), std::move(*context)));
}

boost::system::result<void, std::string> TlsContext::Reload() {
  auto context = LoadContext(cert_file_, key_file_);
  if (!context) return context.error();
  std::lock_guard<std::mutex> lock(mu_);
  context_ = std::move(*context);
  return {};
}

std::shared_ptr<ssl::context> TlsContext::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return context_;
}

}  // namespace kbox
