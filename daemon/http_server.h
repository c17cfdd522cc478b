#pragma once

// kboxd's HTTP/1.1 server (Boost.Beast, C++20 coroutines): a timeout on every
// read and write (and on the TLS handshake), a header and body limit on every
// request, keep-alive, and a clear 4xx for anything malformed. Requests go to
// ApiHandler one at a time per connection. With a TlsContext the listener
// speaks HTTPS only.

#include <chrono>
#include <cstdint>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/result.hpp>

#include "daemon/api_handler.h"
#include "daemon/tls_context.h"

namespace kbox {

struct ServerLimits {
  uint64_t max_body_bytes = 4 << 20;
  uint32_t max_header_bytes = 16 << 10;
  std::chrono::seconds read_timeout{30};
  std::chrono::seconds write_timeout{30};
};

class HttpServer {
 public:
  // `tls` null: plain HTTP. Otherwise it must outlive the server.
  HttpServer(boost::asio::io_context& io, ApiHandler& handler, ServerLimits limits,
             const TlsContext* tls = nullptr);

  // Binds "HOST:PORT" (port 0 picks a free one) and starts accepting.
  boost::system::result<boost::asio::ip::tcp::endpoint, std::string> Start(
      const std::string& host_port);

  // Stops accepting; open connections finish their current request.
  void Stop();

 private:
  boost::asio::awaitable<void> AcceptLoop();
  boost::asio::awaitable<void> Session(boost::asio::ip::tcp::socket socket);

  boost::asio::io_context& io_;
  ApiHandler& handler_;
  ServerLimits limits_;
  const TlsContext* tls_;
  boost::asio::ip::tcp::acceptor acceptor_;
};

}  // namespace kbox
