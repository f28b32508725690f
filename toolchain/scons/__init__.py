"""SCons tools of aoti-toolchain (loaded by SConstruct with toolpath=['toolchain/scons'])."""
