// The executor every I/O object of the warden runs on, and the I/O types
// named with it.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <chrono>

namespace lmwarden::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

// Each I/O thread runs an io_context of its own, and what runs on it names
// that context's executor type rather than asio::any_io_executor (Asio's
// default): a completion, a post or a coroutine's resumption then reaches
// the scheduler directly instead of through a type-erased executor.
using Executor = asio::io_context::executor_type;
template <typename T = void>
using Awaitable = asio::awaitable<T, Executor>;
using Socket = asio::basic_stream_socket<tcp, Executor>;
using Acceptor = asio::basic_socket_acceptor<tcp, Executor>;
using Resolver = asio::ip::basic_resolver<tcp, Executor>;
using Timer = asio::basic_waitable_timer<std::chrono::steady_clock,
                                         asio::wait_traits<std::chrono::steady_clock>, Executor>;
using Stream = beast::basic_stream<tcp, Executor>;

}  // namespace lmwarden::net
