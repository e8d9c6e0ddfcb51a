# `cmake --install` and `cpack -G DEB`: where each part of vkattn goes on a Debian system, the
# exported CMake package (find_package(vkattn)), the pkg-config file, and the Debian packages.
#   runtime  libvkattn.so.X.Y                                   -> package libvkattnX.Y
#   tools    the vkattn command line, the lessons               -> package vkattn
#   dev      headers, libvkattn.so, CMake package, pkg-config   -> package libvkattn-dev
#   python   the Python package (python/CMakeLists.txt)           -> package python3-vkattn
# Shaders are embedded in the library: nothing else is needed beside a program.
include(CMakePackageConfigHelpers)

set(VKATTN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/vkattn)

# The include directory travels with the target (engine/CMakeLists.txt: INSTALL_INTERFACE).
install(TARGETS vkattn EXPORT vkattnTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/vkattn ${PROJECT_BINARY_DIR}/include/vkattn
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev FILES_MATCHING PATTERN "*.h")
install(EXPORT vkattnTargets NAMESPACE vkattn:: DESTINATION ${VKATTN_CMAKE_DIR} COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/vkattnConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/vkattnConfig.cmake INSTALL_DESTINATION ${VKATTN_CMAKE_DIR})
# 0.x: a minor version may break the API, as the soname says.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/vkattnConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/vkattnConfig.cmake ${PROJECT_BINARY_DIR}/vkattnConfigVersion.cmake
        DESTINATION ${VKATTN_CMAKE_DIR} COMPONENT dev)
file(RELATIVE_PATH VKATTN_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${PROJECT_SOURCE_DIR}/cmake/vkattn.pc.in ${PROJECT_BINARY_DIR}/vkattn.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/vkattn.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

if(VKATTN_BUILD_TOOLS)
  install(TARGETS vkattn_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT tools)
endif()

# Debian packages, one per component, their dependencies read from what the binaries link
# (dpkg-shlibdeps).
set(CPACK_PACKAGE_NAME vkattn)
set(CPACK_PACKAGE_VENDOR vkattn)
set(CPACK_PACKAGE_CONTACT "vkattn developers <vkattn@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Multi-head attention, step by step, on any Vulkan device")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_COMPONENTS_ALL runtime tools dev)
if(VKATTN_BUILD_PYTHON)
  list(APPEND CPACK_COMPONENTS_ALL python)
endif()
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# libvkattn is in the runtime package, not yet installed when the tools' dependencies are read.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR}/engine)
set(CPACK_STRIP_FILES ON)  # the build may carry debug information; the packages do not
set(abi ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libvkattn${abi})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
# Vulkan-Hpp's raii::Context opens the loader (libvulkan.so.1) at run time: dpkg-shlibdeps, which
# reads what is linked, cannot see it.
set(CPACK_DEBIAN_RUNTIME_PACKAGE_DEPENDS libvulkan1)
# A Vulkan device: lavapipe runs on any machine.
set(CPACK_DEBIAN_RUNTIME_PACKAGE_RECOMMENDS "mesa-vulkan-drivers | vulkan-icd")
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME vkattn)
set(CPACK_DEBIAN_TOOLS_PACKAGE_DEPENDS "libvkattn${abi} (= ${PROJECT_VERSION})")
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libvkattn-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libvkattn${abi} (= ${PROJECT_VERSION}), nlohmann-json3-dev (>= 3)")
set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-vkattn)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "libvkattn${abi} (= ${PROJECT_VERSION}), ${VKATTN_PYTHON_DEPENDS}")
set(CPACK_COMPONENT_PYTHON_DESCRIPTION "import vkattn: the engine from Python, beside PyTorch")
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION "vkattn's library: the CPU reference and the Vulkan backend")
set(CPACK_COMPONENT_TOOLS_DESCRIPTION "the vkattn command line: devices, demo, run, encode, diff, bench")
set(CPACK_COMPONENT_DEV_DESCRIPTION "vkattn's headers, CMake package and pkg-config file")
include(CPack)
