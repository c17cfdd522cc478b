#include "clients/http_client.h"

#include <cstdlib>
#include <fstream>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

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
  if (rest.starts_with("http://")) rest = rest.substr(7);
  else if (rest.find("://") != std::string::npos) return ClientError{"only http:// server URLs are supported"};
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find('/') != std::string::npos) return ClientError{"server URL must not have a path: " + url};
  const auto colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == rest.size()) {
    return ClientError{"server URL must be http://HOST:PORT, got " + url};
  }
  std::string host = rest.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return ServerUrl{host, rest.substr(colon + 1)};
}

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
  stream.expires_after(timeout);
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
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
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
