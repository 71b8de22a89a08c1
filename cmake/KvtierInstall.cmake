# Installation (`cmake --install`) and the Debian package (`make deb`, CPack): the `kvtier` CLI, the C API
# library libkvtier.so (SONAME libkvtier.so.<ABI>), its header kvtier/kvtier.h, a CMake package
# (`find_package(kvtier)` -> imported target kvtier::kvtier), a pkg-config file (kvtier.pc) and the
# service files of deploy/ under share/kvtier.
# Only the C API is installed: the C++ headers of include/kvtier/ declare the layer libraries, which are
# static and not installed (libkvtier.so exports only kvtier_* symbols), so no installed program could
# link against them. docs/deploy.md describes the installed layout.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The real file is libkvtier.so.<ABI>.<minor>.<patch>: the SONAME (SOVERSION, src/capi) is the ABI of
# kvtier.h (KVTIER_ABI_VERSION), the rest follows the project's version.
get_target_property(KVTIER_SOVERSION kvtier_shared SOVERSION)
set_target_properties(kvtier_shared PROPERTIES
  VERSION ${KVTIER_SOVERSION}.${PROJECT_VERSION_MINOR}.${PROJECT_VERSION_PATCH}
  EXPORT_NAME kvtier)

install(TARGETS kvtier_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS kvtier_shared EXPORT kvtierTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/kvtier/kvtier.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvtier)
# The service files of deploy/ as examples to copy (docs/deploy.md): nothing is enabled by installing them.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/deploy/systemd ${PROJECT_SOURCE_DIR}/deploy/kubernetes
  DESTINATION ${CMAKE_INSTALL_DATADIR}/kvtier)

set(KVTIER_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kvtier)
install(EXPORT kvtierTargets NAMESPACE kvtier:: DESTINATION ${KVTIER_CMAKE_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/kvtierConfig.cmake.in
  ${PROJECT_BINARY_DIR}/kvtierConfig.cmake INSTALL_DESTINATION ${KVTIER_CMAKE_DIR})
# Same major version: the 0.x series is one ABI (KVTIER_ABI_VERSION 1) until the SONAME changes.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kvtierConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kvtierConfig.cmake ${PROJECT_BINARY_DIR}/kvtierConfigVersion.cmake
  DESTINATION ${KVTIER_CMAKE_DIR})

# kvtier.pc is written at install time, so that its prefix is the one installed to (`--prefix`, CPack's
# /usr), not the one configured.
install(CODE "set(KVTIER_PC_TEMPLATE \"${CMAKE_CURRENT_LIST_DIR}/kvtier.pc.in\")
set(KVTIER_PC_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
set(KVTIER_PC_INCLUDEDIR \"${CMAKE_INSTALL_INCLUDEDIR}\")
set(KVTIER_PC_VERSION \"${PROJECT_VERSION}\")")
install(SCRIPT ${CMAKE_CURRENT_LIST_DIR}/KvtierInstallPc.cmake)

# `make deb`: one package, kvtier, installed under /usr; its dependencies from dpkg-shlibdeps, and a
# shlibs file for packages that link libkvtier.so.1; CPack adds a postinst and postrm that run ldconfig.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME kvtier)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "tiered store for the attention KV cache of LLM inference")
set(CPACK_PACKAGE_DESCRIPTION "kvtier keeps the KV cache of LLM inference outside GPU memory (memory, local \
disk, shared filesystem pools, Redis, Ceph, S3). This package holds the kvtier command, the C API library \
libkvtier.so.1 with its header, a CMake package and a pkg-config file.")
set(CPACK_PACKAGE_CONTACT "kvtier developers <kvtier@localhost>" CACHE STRING "Maintainer of the .deb")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
include(CPack)
