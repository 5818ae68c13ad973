#pragma once
/// A minimal blocking WebSocket client over client_socket (RFC 6455: upgrade, masked text frames
/// out, unmasked frames in), so that the server's WebSocket code is not tested through Beast.
#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>

#include "http_client.hpp"

namespace actorserve::testing {

/// One frame from the server.
struct ws_frame {
  int opcode = 0;        ///< 1 text, 8 close, 9 ping, 10 pong
  std::string payload;
};

class ws_client {
 public:
  /// Connects and upgrades on /v1/stream; ok() tells whether the server answered 101. A small
  /// `rcvbuf` (SO_RCVBUF) makes a client that stops reading back up the server quickly.
  /// `early`: bytes sent in the same write as the upgrade request (e.g. frame(...) results).
  explicit ws_client(uint16_t port, int rcvbuf = 0, const std::string& early = {}) : s_(port, rcvbuf) {
    if (!s_.ok()) return;
    s_.send_all("GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n" + early);
    size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos)
      if (!s_.read_some(buf_)) return;
    ok_ = buf_.rfind("HTTP/1.1 101", 0) == 0;
    buf_.erase(0, end + 4);
  }
  bool ok() const { return ok_; }
  client_socket& socket() { return s_; }

  /// Sends one masked text frame.
  bool send_text(const std::string& text) { return s_.send_all(frame(text)); }

  /// One masked text frame's bytes.
  static std::string frame(const std::string& text) {
    std::string f;
    f += static_cast<char>(0x81);
    const size_t n = text.size();
    if (n < 126) {
      f += static_cast<char>(0x80 | n);
    } else if (n < 65536) {
      f += static_cast<char>(0x80 | 126);
      f += static_cast<char>(n >> 8);
      f += static_cast<char>(n & 0xff);
    } else {
      f += static_cast<char>(0x80 | 127);
      for (int i = 7; i >= 0; --i) f += static_cast<char>((static_cast<uint64_t>(n) >> (8 * i)) & 0xff);
    }
    const char mask[4] = {0x12, 0x34, 0x56, 0x78};
    f.append(mask, 4);
    for (size_t i = 0; i < n; ++i) f += static_cast<char>(text[i] ^ mask[i % 4]);
    return f;
  }

  /// The next frame, or nothing when the connection ended (or the receive timeout passed).
  std::optional<ws_frame> read_frame() {
    if (!fill(2)) return std::nullopt;
    ws_frame fr;
    fr.opcode = static_cast<unsigned char>(buf_[0]) & 0x0f;
    uint64_t len = static_cast<unsigned char>(buf_[1]) & 0x7f;
    size_t head = 2;
    if (len == 126 || len == 127) {
      const size_t extra = len == 126 ? 2 : 8;
      if (!fill(2 + extra)) return std::nullopt;
      len = 0;
      for (size_t i = 0; i < extra; ++i) len = (len << 8) | static_cast<unsigned char>(buf_[2 + i]);
      head += extra;
    }
    if (!fill(head + len)) return std::nullopt;
    fr.payload = buf_.substr(head, len);
    buf_.erase(0, head + len);
    return fr;
  }

  /// Reads frames until a text frame (answering nothing); nothing when the connection ended.
  std::optional<std::string> read_text() {
    while (auto f = read_frame())
      if (f->opcode == 1) return f->payload;
    return std::nullopt;
  }

 private:
  bool fill(size_t n) {
    while (buf_.size() < n)
      if (!s_.read_some(buf_)) return false;
    return true;
  }

  client_socket s_;
  std::string buf_;
  bool ok_ = false;
};

}  // namespace actorserve::testing
