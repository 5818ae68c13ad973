# cmake -DINPUT=file -DTEMPLATE=x.cpp.in -DOUTPUT=x.cpp -P embed_file.cmake
# Writes TEMPLATE to OUTPUT with @EMBED_BYTES@ replaced by INPUT's bytes as a C++ initializer
# list ("0x3c,0x21,...", 16 a line), so a file of the tree is compiled into the binary.
file(READ "${INPUT}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," EMBED_BYTES "${hex}")
string(REPEAT "." 80 line)  # 16 bytes of "0x3c,"
string(REGEX REPLACE "(${line})" "\\1\n" EMBED_BYTES "${EMBED_BYTES}")
configure_file("${TEMPLATE}" "${OUTPUT}" @ONLY)
