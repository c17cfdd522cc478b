#pragma once

// kboxd's HTTP/1.1 server (Boost.Beast, C++20 coroutines): a timeout on every
// read and write (and on the TLS handshake), a header and body limit on every
// request, keep-alive, a bound on open connections, and a clear 4xx for
// anything malformed. Requests go to ApiHandler one at a time per connection.
// With a TlsContext the listener speaks HTTPS only. What each abusive client
// meets is in docs/reliability.md, "Hostile input".

#include <atomic>
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
  // Request line and headers, from when the connection may send them (the
  // accept, or the end of the previous answer): slowloris and idle
  // keep-alive connections end here. At most read_timeout.
  std::chrono::seconds header_timeout{10};
  // The whole request, headers and body.
  std::chrono::seconds read_timeout{30};
  std::chrono::seconds write_timeout{30};
  // Connections open at once; past it a new one gets 503 and is closed.
  uint32_t max_connections = 4096;
};

// TLS connections past max_connections answered 503 at once (each holds a
// socket and a handshake for up to header_timeout); past this many, further
// ones are closed without an answer. A plain 503 costs one write and no
// wait, so plain HTTP needs no such bound.
inline constexpr uint32_t kMaxTlsRefusals = 64;

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
  // The 503 a connection past max_connections gets.
  HttpResponse OverLimitResponse();
  // Answers it on a plain connection and closes it, without waiting on the
  // client.
  void Refuse(boost::asio::ip::tcp::socket socket);
  // Answers it on a TLS connection: handshake, read the request's headers,
  // 503, close_notify, all within header_timeout of the accept.
  boost::asio::awaitable<void> RefuseTls(boost::asio::ip::tcp::socket socket);

  boost::asio::io_context& io_;
  ApiHandler& handler_;
  ServerLimits limits_;
  const TlsContext* tls_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::atomic<uint32_t> open_connections_{0};
  // TLS connections past max_connections being answered (RefuseTls); past
  // kMaxTlsRefusals more are closed at once, unanswered.
  std::atomic<uint32_t> tls_refusals_{0};
};

}  // namespace kbox
