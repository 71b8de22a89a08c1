# Install-time script (cmake/KvtierInstall.cmake): writes kvtier.pc for the prefix being installed to.
set(KVTIER_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
set(KVTIER_PC_FILE "${CMAKE_INSTALL_PREFIX}/${KVTIER_PC_LIBDIR}/pkgconfig/kvtier.pc")
file(READ "${KVTIER_PC_TEMPLATE}" KVTIER_PC_CONTENT)
message(STATUS "Installing: $ENV{DESTDIR}${KVTIER_PC_FILE}")
file(CONFIGURE OUTPUT "$ENV{DESTDIR}${KVTIER_PC_FILE}" CONTENT "${KVTIER_PC_CONTENT}" @ONLY)
list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${KVTIER_PC_FILE}")
