#include "daemon/http_server.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <algorithm>
#include <sstream>

namespace kbox {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;

namespace {

constexpr auto kUseTuple = asio::as_tuple(asio::use_awaitable);
// After refusing an oversized request, how long to keep reading (and
// discarding) what the client still sends, so it sees our answer rather than
// a connection reset.
constexpr auto kDiscardWindow = std::chrono::seconds(2);

struct Refusal {
  http::status status;
  std::string field;
  std::string message;
};

// A read error that deserves an answer rather than a silent close.
std::optional<Refusal> RefusalFor(const beast::error_code& ec, const ServerLimits& limits) {
  // The client closed the connection (between requests, or in the middle of
  // one): nobody to answer, and no malformed request to count.
  if (ec == http::error::end_of_stream || ec == http::error::partial_message) return std::nullopt;
  if (ec == http::error::body_limit) {
    return Refusal{http::status::payload_too_large, "body",
                   "request body exceeds the limit of " + std::to_string(limits.max_body_bytes) +
                       " bytes"};
  }
  if (ec == http::error::header_limit) {
    return Refusal{http::status::request_header_fields_too_large, "headers",
                   "request headers exceed " + std::to_string(limits.max_header_bytes) + " bytes"};
  }
  if (ec.category() == http::make_error_code(http::error::bad_method).category()) {
    return Refusal{http::status::bad_request, "request", "malformed HTTP request: " + ec.message()};
  }
  return std::nullopt;
}

// One connection's requests, plain or TLS: read, answer, repeat while the
// client keeps the connection alive.
template <class Stream>
asio::awaitable<void> Serve(Stream& stream, ApiHandler& handler, const ServerLimits& limits) {
  auto& lowest = beast::get_lowest_layer(stream);
  beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(limits.max_header_bytes);
    parser.body_limit(limits.max_body_bytes);
    // Two deadlines, both from now: the headers must be in by the first
    // (a slowloris client, or a kept-alive connection left idle, is closed
    // there), the whole request by the second.
    const auto start = std::chrono::steady_clock::now();
    lowest.expires_at(start + std::min(limits.header_timeout, limits.read_timeout));
    auto [read_ec, header_bytes] = co_await http::async_read_header(stream, buffer, parser, kUseTuple);
    (void)header_bytes;
    if (!read_ec && !parser.is_done()) {
      lowest.expires_at(start + limits.read_timeout);
      auto [body_ec, body_bytes] = co_await http::async_read(stream, buffer, parser, kUseTuple);
      (void)body_bytes;
      read_ec = body_ec;
    }
    if (read_ec) {
      if (auto refusal = RefusalFor(read_ec, limits)) {
        auto res = handler.Error(refusal->status, refusal->field, refusal->message);
        res.keep_alive(false);
        lowest.expires_after(limits.write_timeout);
        co_await http::async_write(stream, res, kUseTuple);
        beast::error_code ignored;
        lowest.socket().shutdown(tcp::socket::shutdown_send, ignored);
        // Swallow the rest of the upload for a moment so the client reads
        // our answer instead of a reset.
        lowest.expires_after(kDiscardWindow);
        for (;;) {
          buffer.clear();
          auto [ec, n] = co_await lowest.async_read_some(buffer.prepare(64 * 1024), kUseTuple);
          if (ec || n == 0) break;
        }
      }
      co_return;  // Timeout, reset or clean end of stream: just close.
    }
    lowest.expires_never();  // The job has its own limits.
    HttpResponse res = co_await handler.Handle(parser.release());
    lowest.expires_after(limits.write_timeout);
    auto [write_ec, written] = co_await http::async_write(stream, res, kUseTuple);
    (void)written;
    if (write_ec || !res.keep_alive()) co_return;
  }
}

}  // namespace

HttpServer::HttpServer(asio::io_context& io, ApiHandler& handler, ServerLimits limits,
                       const TlsContext* tls)
    : io_(io), handler_(handler), limits_(limits), tls_(tls), acceptor_(io) {}
boost::system::result<tcp::endpoint, std::string> HttpServer::Start(const std::string& host_port) {
  const auto colon = host_port.rfind(':');
  if (colon == std::string::npos) return "listen address must be HOST:PORT, got " + host_port;
  std::string host = host_port.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  unsigned long port = 0;
  try {
    size_t used = 0;
    port = std::stoul(host_port.substr(colon + 1), &used);
    if (used != host_port.size() - colon - 1 || port > 65535) throw std::out_of_range("port");
  } catch (const std::exception&) {
    return "invalid port in " + host_port;
  }
  beast::error_code ec;
  const auto address = asio::ip::make_address(host.empty() ? "0.0.0.0" : host, ec);
  if (ec) return "invalid listen address " + host + ": " + ec.message();
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return "cannot listen on " + host_port + ": " + ec.message();
  asio::co_spawn(io_, AcceptLoop(), asio::detached);
  return acceptor_.local_endpoint();
}

void HttpServer::Stop() {
  beast::error_code ec;
  acceptor_.close(ec);
}

asio::awaitable<void> HttpServer::AcceptLoop() {
  while (acceptor_.is_open()) {
    // Each connection on a strand of its own: with io_threads > 1 the
    // connection's coroutine and its stream's timeout timer (which closes the
    // socket) would otherwise run on two threads at once, a data race that
    // crashed kboxd in epoll_reactor::deregister_descriptor under an idle-
    // connection flood (docs/reliability.md).
    auto [ec, socket] = co_await acceptor_.async_accept(asio::make_strand(io_), kUseTuple);
    if (ec) {
      if (ec == asio::error::operation_aborted) co_return;
      continue;  // EMFILE and friends: keep serving the connections we have.
    }
    if (open_connections_.load() >= limits_.max_connections) {
      if (tls_ != nullptr && tls_refusals_.load() < kMaxTlsRefusals) {
        ++tls_refusals_;
        auto executor = socket.get_executor();
        asio::co_spawn(executor, RefuseTls(std::move(socket)),
                       [this](std::exception_ptr) { --tls_refusals_; });
      } else {
        Refuse(std::move(socket));
      }
      continue;
    }
    ++open_connections_;
    auto executor = socket.get_executor();
    asio::co_spawn(executor, Session(std::move(socket)), [this](std::exception_ptr) {
      --open_connections_;
    });
  }
}

HttpResponse HttpServer::OverLimitResponse() {
  HttpResponse res = handler_.Error(http::status::service_unavailable, "connection",
                                    "kboxd has " + std::to_string(limits_.max_connections) +
                                        " connections open, its max_connections; retry later");
  res.set(http::field::retry_after, "1");
  res.keep_alive(false);
  return res;
}

void HttpServer::Refuse(tcp::socket socket) {
  // One non-blocking write into the fresh socket's empty send buffer: the
  // client that is over the limit learns why, and nothing here waits on it.
  // A TLS connection gets here only past kMaxTlsRefusals: no handshake, no
  // answer, just the close.
  beast::error_code ec;
  if (tls_ == nullptr) {
    std::ostringstream wire;
    wire << OverLimitResponse();
    socket.non_blocking(true, ec);
    if (!ec) socket.write_some(asio::buffer(wire.str()), ec);
  }
  socket.shutdown(tcp::socket::shutdown_both, ec);
  socket.close(ec);
}

asio::awaitable<void> HttpServer::RefuseTls(tcp::socket socket) {
  // A TLS client can only read an answer after a handshake, so this one
  // waits on the client, but for no longer than header_timeout from the
  // accept in all (the time a slowloris connection is held anyway), and at
  // most kMaxTlsRefusals at once.
  const auto context = tls_->current();  // Kept for the stream's life, as in Session.
  beast::ssl_stream<beast::tcp_stream> stream(beast::tcp_stream(std::move(socket)), *context);
  auto& lowest = beast::get_lowest_layer(stream);
  lowest.expires_after(std::min(limits_.header_timeout, limits_.read_timeout));
  auto [handshake_ec] = co_await stream.async_handshake(asio::ssl::stream_base::server, kUseTuple);
  if (handshake_ec) co_return;
  // Read the request's headers first: closing with them unread would reset
  // the connection, and the client could lose the answer. The body, if
  // any, is not read.
  beast::flat_buffer buffer;
  http::request_parser<http::empty_body> parser;
  parser.header_limit(limits_.max_header_bytes);
  auto [read_ec, read] = co_await http::async_read_header(stream, buffer, parser, kUseTuple);
  (void)read;
  if (read_ec && read_ec != http::error::header_limit) co_return;
  HttpResponse res = OverLimitResponse();
  auto [write_ec, written] = co_await http::async_write(stream, res, kUseTuple);
  (void)written;
  if (write_ec) co_return;
  co_await stream.async_shutdown(kUseTuple);  // close_notify; a peer already gone is fine.
  beast::error_code ignored;
  lowest.socket().shutdown(tcp::socket::shutdown_both, ignored);
}

asio::awaitable<void> HttpServer::Session(tcp::socket socket) {
  beast::tcp_stream plain(std::move(socket));
  beast::error_code ignored;
  if (tls_ == nullptr) {
    co_await Serve(plain, handler_, limits_);
    plain.socket().shutdown(tcp::socket::shutdown_both, ignored);
    co_return;
  }
  // This connection keeps the context it started with across a reload.
  const auto context = tls_->current();
  beast::ssl_stream<beast::tcp_stream> stream(std::move(plain), *context);
  auto& lowest = beast::get_lowest_layer(stream);
  lowest.expires_after(limits_.read_timeout);
  auto [handshake_ec] = co_await stream.async_handshake(asio::ssl::stream_base::server, kUseTuple);
  if (handshake_ec) co_return;  // Plain HTTP, an old protocol, a port scan: just close.
  co_await Serve(stream, handler_, limits_);
  lowest.expires_after(limits_.write_timeout);
  co_await stream.async_shutdown(kUseTuple);  // close_notify; a peer already gone is fine.
  lowest.socket().shutdown(tcp::socket::shutdown_both, ignored);
}

}  // namespace kbox
