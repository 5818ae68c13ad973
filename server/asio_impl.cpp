// Asio and Beast compiled once for the whole program (BOOST_ASIO_SEPARATE_COMPILATION and
// BOOST_BEAST_SEPARATE_COMPILATION are defined on actorserve_server): the other server TUs only
// instantiate their own composed operations.
#include <boost/asio/impl/src.hpp>
#include <boost/beast/src.hpp>
