#pragma once
/// A minimal blocking HTTP/1.1 client over POSIX sockets for the server tests: no Beast on the
/// test side, so a bug in the server's HTTP code cannot hide behind the same library.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace actorserve::testing {

struct http_response {
  int status = 0;
  std::map<std::string, std::string> headers;  ///< lower-case names
  std::string body;                            ///< de-chunked
};

/// A connected socket, closed on destruction.
class client_socket {
 public:
  explicit client_socket(uint16_t port, int rcvbuf = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) close();
  }
  ~client_socket() { close(); }
  client_socket(const client_socket&) = delete;
  client_socket& operator=(const client_socket&) = delete;
  bool ok() const { return fd_ >= 0; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool send_all(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  /// Reads more bytes into `buf`; false on EOF or error.
  bool read_some(std::string& buf) {
    char tmp[16384];
    const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf.append(tmp, static_cast<size_t>(n));
    return true;
  }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

inline std::string make_request(std::string_view method, std::string_view path, std::string_view body,
                                const std::vector<std::string>& extra_headers = {}) {
  std::string req = std::string(method) + " " + std::string(path) + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (const auto& h : extra_headers) req += h + "\r\n";
  if (!body.empty() || method == "POST") {
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "\r\n";
  req += body;
  return req;
}

/// Reads one response from `s` (Content-Length, chunked or until close), skipping interim 1xx
/// responses as clients must. `buf` keeps leftovers; `interim` counts the 1xx skipped.
inline http_response read_response(client_socket& s, std::string& buf, int* interim = nullptr) {
  http_response r;
  size_t head_end;
  std::string head;
  for (;;) {
    while ((head_end = buf.find("\r\n\r\n")) == std::string::npos)
      if (!s.read_some(buf)) return r;
    head = buf.substr(0, head_end);
    buf.erase(0, head_end + 4);
    if (head.size() < 12 || head[9] != '1') break;
    if (interim) ++*interim;
  }
  r.status = std::stoi(head.substr(9, 3));
  size_t pos = head.find("\r\n");
  while (pos != std::string::npos && pos + 2 < head.size()) {
    const size_t next = head.find("\r\n", pos + 2);
    const std::string line = head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
    const size_t colon = line.find(':');
    std::string name = line.substr(0, colon);
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    r.headers[name] = line.substr(line.find_first_not_of(' ', colon + 1));
    pos = next;
  }
  if (r.status == 204 || r.status == 304) return r;  // no body by definition
  if (r.headers.count("content-length")) {
    const size_t len = std::stoul(r.headers["content-length"]);
    while (buf.size() < len)
      if (!s.read_some(buf)) break;
    r.body = buf.substr(0, len);
    buf.erase(0, std::min(len, buf.size()));
  } else if (r.headers["transfer-encoding"] == "chunked") {
    for (;;) {
      size_t eol;
      while ((eol = buf.find("\r\n")) == std::string::npos)
        if (!s.read_some(buf)) return r;
      const size_t size = std::stoul(buf.substr(0, eol), nullptr, 16);
      while (buf.size() < eol + 2 + size + 2)
        if (!s.read_some(buf)) return r;
      r.body += buf.substr(eol + 2, size);
      buf.erase(0, eol + 2 + size + 2);
      if (size == 0) break;
    }
  } else {
    while (s.read_some(buf)) {}
    r.body = std::move(buf);
    buf.clear();
  }
  return r;
}

/// One request on a fresh connection.
inline http_response http_call(uint16_t port, std::string_view method, std::string_view path, std::string_view body = {},
                               const std::vector<std::string>& headers = {}) {
  client_socket s(port);
  if (!s.ok()) return {};
  s.send_all(make_request(method, path, body, headers));
  std::string buf;
  return read_response(s, buf);
}

/// The JSON payloads of an SSE body ("data: X\n\n" -> X), [DONE] included.
inline std::vector<std::string> sse_payloads(std::string_view body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string_view::npos) {
    const size_t end = body.find("\n\n", pos);
    out.emplace_back(body.substr(pos + 6, end - pos - 6));
    pos = end == std::string_view::npos ? body.size() : end + 2;
  }
  return out;
}

}  // namespace actorserve::testing
