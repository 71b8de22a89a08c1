# Every dependency comes from Debian packages installed by scripts/install-deps.sh.
find_package(Threads REQUIRED)
find_package(OpenSSL REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(URING REQUIRED IMPORTED_TARGET liburing)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(BLAS REQUIRED)
# Prometheus text exposition (src/metrics); only the core library (prometheus-cpp::core) is linked.
find_package(prometheus-cpp CONFIG REQUIRED)
if(KVTIER_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(KVTIER_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
# librados (librados-dev: no pkg-config file in Debian 12) for rados:// tiers.
find_library(RADOS_LIBRARY rados REQUIRED)
find_path(RADOS_INCLUDE_DIR rados/librados.h REQUIRED)
add_library(Kvtier::rados UNKNOWN IMPORTED)
set_target_properties(Kvtier::rados PROPERTIES IMPORTED_LOCATION "${RADOS_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${RADOS_INCLUDE_DIR}")
# libcurl (libcurl4-openssl-dev, >= 7.75 for CURLOPT_AWS_SIGV4) for s3:// tiers.
find_package(CURL 7.75 REQUIRED)
# Chunk events (src/events): ZeroMQ (libzmq3-dev, cppzmq-dev's header-only zmq.hpp) and msgpack
# (libmsgpack-cxx-dev, header-only, used without Boost).
pkg_check_modules(ZMQ REQUIRED IMPORTED_TARGET libzmq)
find_path(CPPZMQ_INCLUDE_DIR zmq.hpp REQUIRED)
find_path(MSGPACK_INCLUDE_DIR msgpack.hpp REQUIRED)
add_library(Kvtier::events_deps INTERFACE IMPORTED)
set_target_properties(Kvtier::events_deps PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${CPPZMQ_INCLUDE_DIR};${MSGPACK_INCLUDE_DIR}"
  INTERFACE_COMPILE_DEFINITIONS "MSGPACK_NO_BOOST"
  INTERFACE_LINK_LIBRARIES PkgConfig::ZMQ)
# `kvtier serve` (src/tools/serve): Boost.Beast over Boost.Asio (libboost-dev, header-only; Asio's TLS
# uses OpenSSL). Found through Boost's own CMake package (CMake 3.30+ has no FindBoost module).
find_package(Boost 1.74 CONFIG REQUIRED COMPONENTS headers)
