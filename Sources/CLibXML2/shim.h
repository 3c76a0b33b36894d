// libxml2's SAX2 push parser (pkg-config libxml-2.0 adds -I/usr/include/libxml2).
#include <libxml/xmlversion.h>
// Debian builds libxml2 with ICU, whose headers would clash with the copy that
// Foundation ships. Without the macro, encoding.h leaves out the ICU include and
// the two ICU pointers at the end of xmlCharEncodingHandler; nothing here reads
// that struct, only pointers to it.
#undef LIBXML_ICU_ENABLED
#include <libxml/parser.h>
#include <libxml/SAX2.h>
