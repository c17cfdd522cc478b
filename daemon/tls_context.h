#pragma once

// TLS for kboxd's listener (docs/api.md, "TLS"): the server's certificate
// chain and private key (PEM files), TLS 1.2 and later only. Re-read on
// SIGHUP: a new context for connections accepted from then on (open ones keep
// theirs), or, when the new pair does not load, the old one stays.

#include <memory>
#include <mutex>
#include <string>

#include <boost/asio/ssl/context.hpp>
#include <boost/system/result.hpp>

namespace kbox {

class TlsContext {
 public:
  // Loads the pair; the error names the file and what OpenSSL said (never
  // the key's contents).
  static boost::system::result<std::unique_ptr<TlsContext>, std::string> Open(
      std::string cert_file, std::string key_file);

  // Re-reads both files; on error keeps the current context and says why.
  boost::system::result<void, std::string> Reload();

  // The context new connections use; kept alive by each connection.
  std::shared_ptr<boost::asio::ssl::context> current() const;

  const std::string& cert_file() const { return cert_file_; }

 private:
  TlsContext(std::string cert_file, std::string key_file,
             std::shared_ptr<boost::asio::ssl::context> context);

  const std::string cert_file_;
  const std::string key_file_;
  mutable std::mutex mu_;
  std::shared_ptr<boost::asio::ssl::context> context_;
};

}  // namespace kbox
