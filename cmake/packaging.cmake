# The Debian package (`cpack -G DEB` in a build dir): the server binary, a default config
# (/etc/tollgate/tollgate.toml, a conffile), a hardened systemd unit, logrotate for the access
# log, and the --help reference as a man page and plain text. Files: deploy/debian/.
set(deb ${PROJECT_SOURCE_DIR}/deploy/debian)

add_custom_command(
  OUTPUT ${PROJECT_BINARY_DIR}/reference/tollgate.1 ${PROJECT_BINARY_DIR}/reference/reference.txt
  COMMAND ${CMAKE_COMMAND} -DTOLLGATE=$<TARGET_FILE:tollgate> -DVERSION=${PROJECT_VERSION}
          -DOUT_TXT=${PROJECT_BINARY_DIR}/reference/reference.txt
          -DOUT_MAN=${PROJECT_BINARY_DIR}/reference/tollgate.1
          -P ${PROJECT_SOURCE_DIR}/cmake/reference.cmake
  DEPENDS tollgate ${PROJECT_SOURCE_DIR}/cmake/reference.cmake
  COMMENT "tollgate --help reference")
# Part of every release build (the package needs it); a sanitizer build skips it.
if(TOLLGATE_SANITIZE)
  set(reference_all "")
else()
  set(reference_all ALL)
endif()
add_custom_target(tollgate_reference ${reference_all}
  DEPENDS ${PROJECT_BINARY_DIR}/reference/tollgate.1 ${PROJECT_BINARY_DIR}/reference/reference.txt)

install(TARGETS tollgate RUNTIME DESTINATION bin COMPONENT server)
install(FILES ${deb}/tollgate.toml DESTINATION /etc/tollgate COMPONENT server)
install(FILES ${deb}/logrotate DESTINATION /etc/logrotate.d RENAME tollgate COMPONENT server)
install(FILES ${deb}/tollgate.service DESTINATION /lib/systemd/system COMPONENT server)
install(FILES ${PROJECT_BINARY_DIR}/reference/tollgate.1 DESTINATION share/man/man1
        COMPONENT server OPTIONAL)
install(FILES ${PROJECT_BINARY_DIR}/reference/reference.txt ${PROJECT_SOURCE_DIR}/README.md
        DESTINATION share/doc/tollgate COMPONENT server OPTIONAL)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME tollgate)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "tollgate maintainers <tollgate@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "MCP server and REST API for story search, behind API keys, rate limits and quotas")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_COMPONENTS_ALL server)
set(CPACK_DEB_COMPONENT_INSTALL OFF)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # Depends: from the binary's shared libraries
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser, procps")  # procps: /bin/kill (ExecReload)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${deb}/conffiles ${deb}/postinst ${deb}/prerm ${deb}/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)

# The package's test (tests/packaging/deb_test.sh): the release build only (a sanitizer build
# is not what would ship).
if(TOLLGATE_BUILD_TESTS AND NOT TOLLGATE_SANITIZE)
  add_test(NAME packaging.deb COMMAND ${PROJECT_SOURCE_DIR}/tests/packaging/deb_test.sh
           ${PROJECT_BINARY_DIR})
  set_tests_properties(packaging.deb PROPERTIES LABELS integration TIMEOUT 300)
endif()
