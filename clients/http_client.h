#pragma once

// A small blocking HTTP/1.1 client for the kbox CLI: one request per
// connection, a connect timeout, and a bound on the response size.

#include <chrono>
#include <string>

#include <boost/system/result.hpp>

namespace kbox {

struct ClientError {
  std::string message;
};

struct ServerUrl {
  std::string host;
  std::string port;
};

// Parses "http://HOST:PORT[/]" (also "HOST:PORT"). https is not supported.
boost::system::result<ServerUrl, ClientError> ParseServerUrl(const std::string& url);

struct HttpReply {
  unsigned status = 0;
  std::string content_type;
  std::string body;
};

// Sends one request and waits up to `timeout` for the whole response.
boost::system::result<HttpReply, ClientError> HttpCall(const ServerUrl& server,
                                                       const std::string& method,
                                                       const std::string& target,
                                                       const std::string& content_type,
                                                       const std::string& body,
                                                       std::chrono::seconds timeout);

}  // namespace kbox
