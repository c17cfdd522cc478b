#include "clients/http_client.h"

#include <cstdlib>
#include <fstream>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

namespace kbox {
namespace beast = boost::beast;
namespace http = beast::http;
using boost::asio::ip::tcp;

namespace {
constexpr auto kConnectTimeout = std::chrono::seconds(10);
constexpr uint64_t kMaxResponseBytes = 64ull << 20;
}  // namespace

boost::system::result<ServerUrl, ClientError> ParseServerUrl(const std::string& url) {
  std::string rest = url;
  bool tls = false;
  if (rest.starts_with("http://")) {
    rest = rest.substr(7);
  } else if (rest.starts_with("https://")) {
    rest = rest.substr(8);
    tls = true;
  } else if (rest.find("://") != std::string::npos) {
    return ClientError{"server URLs are http:// or https://, got " + url};
  }
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find('/') != std::string::npos) return ClientError{"server URL must not have a path: " + url};
  const auto colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == rest.size()) {
    return ClientError{"server URL must be http[s]://HOST:PORT, got " + url};
  }
  std::string host = rest.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return ServerUrl{.host = host, .port = rest.substr(colon + 1), .tls = tls, .ca_file = ""};
}

namespace {

// One exchange on a connected stream (plain or TLS).
template <class Stream>
boost::system::result<HttpReply, ClientError> Exchange(Stream& stream, const ServerUrl& server,
                                                       http::request<http::string_body>& req,
                                                       std::chrono::seconds timeout) {
  beast::error_code ec;
  beast::get_lowest_layer(stream).expires_after(timeout);
  http::write(stream, req, ec);
  if (ec) return ClientError{"cannot send the request: " + ec.message()};
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxResponseBytes);
  http::read(stream, buffer, parser, ec);
  if (ec) return ClientError{"no response from " + server.host + ":" + server.port + ": " + ec.message()};
  const auto& res = parser.get();
  HttpReply reply;
  reply.status = res.result_int();
  reply.content_type = std::string(res[http::field::content_type]);
  reply.body = res.body();
  return reply;
}

}  // namespace

boost::system::result<HttpReply, ClientError> HttpCall(const ServerUrl& server,
                                                       const std::string& method,
                                                       const std::string& target,
                                                       const std::string& content_type,
                                                       const std::string& body,
                                                       std::chrono::seconds timeout,
                                                       const std::string& token) {
  boost::asio::io_context io;
  beast::tcp_stream stream(io);
  beast::error_code ec;
  tcp::resolver resolver(io);
  const auto endpoints = resolver.resolve(server.host, server.port, ec);
  if (ec) return ClientError{"cannot resolve " + server.host + ": " + ec.message()};
  stream.expires_after(kConnectTimeout);
  stream.connect(endpoints, ec);
  if (ec) return ClientError{"cannot connect to " + server.host + ":" + server.port + ": " + ec.message()};

  http::request<http::string_body> req(http::string_to_verb(method), target, 11);
  req.set(http::field::host, server.host);
  req.set(http::field::user_agent, "kbox-cli");
  if (!content_type.empty()) req.set(http::field::content_type, content_type);
  if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
  req.body() = body;
  req.prepare_payload();
  if (!server.tls) {
    auto reply = Exchange(stream, server, req, timeout);
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    return reply;
  }

  namespace ssl = boost::asio::ssl;
  ssl::context tls(ssl::context::tls_client);
  tls.set_options(ssl::context::no_sslv2 | ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                  ssl::context::no_tlsv1_1);
  if (server.ca_file.empty()) {
    tls.set_default_verify_paths(ec);
  } else {
    tls.load_verify_file(server.ca_file, ec);
  }
  if (ec) {
    return ClientError{"cannot load the CA certificates " +
                       (server.ca_file.empty() ? std::string("of the system") : server.ca_file) +
                       ": " + ec.message()};
  }
  tls.set_verify_mode(ssl::verify_peer);
  beast::ssl_stream<beast::tcp_stream> secure(std::move(stream), tls);
  secure.set_verify_callback(ssl::host_name_verification(server.host));
  // SNI: a server behind a proxy picks its certificate by the name.
  // (SSL_set_tlsext_host_name, without the macro's C cast.)
  if (SSL_ctrl(secure.native_handle(), SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
               const_cast<char*>(server.host.c_str())) != 1) {
    return ClientError{"cannot set the TLS server name " + server.host};
  }
  beast::get_lowest_layer(secure).expires_after(kConnectTimeout);
  secure.handshake(ssl::stream_base::client, ec);
  if (ec) {
    return ClientError{"TLS handshake with " + server.host + ":" + server.port + " failed: " +
                       ec.message() + " (a self-signed server needs --ca-file)"};
  }
  auto reply = Exchange(secure, server, req, timeout);
  secure.shutdown(ec);  // The server may close first; its answer is in already.
  return reply;
}

boost::system::result<std::string, ClientError> ResolveToken(const std::string& token_file) {
  std::string token;
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in) return ClientError{"cannot read the token file " + token_file};
    std::getline(in, token);
    if (token.empty()) return ClientError{"the token file " + token_file + " is empty"};
  } else if (const char* env = std::getenv("KBOX_TOKEN"); env != nullptr) {
    token = env;
  }
  // A file written with `echo` or an editor ends in a newline or spaces.
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ' || token.back() == '\t')) {
    token.pop_back();
  }
  // in_place: ClientError is an aggregate a string could build, too.
  return {boost::system::in_place_value, std::move(token)};
}

}  // namespace kbox
