// The runtime's JSON reader (base/json.cpp), compiled into the backend as an object of its own: the backend
// links nothing of the runtime library (it opens libaoti_host.so at TRITONBACKEND_Initialize), and its version
// script keeps these symbols local, so they neither interpose nor are interposed by the runtime's copy.
#include "base/json.cpp"
