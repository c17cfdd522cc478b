#pragma once

// A small blocking HTTP/1.1 client for the kbox CLI: one request per
// connection, a connect timeout, and a bound on the response size; https
// through OpenSSL, the server's certificate checked against the system's CAs
// or a CA file, and its name against the URL's host.

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
  bool tls = false;     // https://
  std::string ca_file;  // PEM CAs that sign the server's certificate; "": the system's.
};

// Parses "http://HOST:PORT[/]", "https://HOST:PORT[/]" (also "HOST:PORT",
// plain http).
boost::system::result<ServerUrl, ClientError> ParseServerUrl(const std::string& url);

struct HttpReply {
  unsigned status = 0;
  std::string content_type;
  std::string body;
};

// Sends one request and waits up to `timeout` for the whole response.
// `token` non-empty: sent as `Authorization: Bearer <token>`.
boost::system::result<HttpReply, ClientError> HttpCall(const ServerUrl& server,
                                                       const std::string& method,
                                                       const std::string& target,
                                                       const std::string& content_type,
                                                       const std::string& body,
                                                       std::chrono::seconds timeout,
                                                       const std::string& token = "");

// The API token for kboxd: the first line of `token_file` when given, else
// $KBOX_TOKEN, else "" (none). Errors name the file, never its contents.
boost::system::result<std::string, ClientError> ResolveToken(const std::string& token_file);

}  // namespace kbox
