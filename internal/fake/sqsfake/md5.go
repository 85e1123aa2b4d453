package sqsfake

import (
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"sort"
)

// MessageAttribute is one message attribute as SQS stores it.
type MessageAttribute struct {
	DataType    string `json:"DataType"`
	StringValue string `json:"StringValue,omitempty"`
	BinaryValue []byte `json:"BinaryValue,omitempty"`
}

func (a MessageAttribute) isBinary() bool { return baseType(a.DataType) == "Binary" }

func baseType(dataType string) string {
	for i := 0; i < len(dataType); i++ {
		if dataType[i] == '.' {
			return dataType[:i]
		}
	}
	return dataType
}

// MD5OfBody returns the hex MD5 of the UTF-8 body, as in MD5OfMessageBody.
func MD5OfBody(body string) string {
	s := md5.Sum([]byte(body))
	return hex.EncodeToString(s[:])
}

// MD5OfMessageAttributes returns the hex MD5 SQS reports as
// MD5OfMessageAttributes, or "" for no attributes. Per the SQS developer
// guide: attributes sorted by name; for each, the name, the data type, one
// transport byte (1 for String and Number, 2 for Binary) and the value, every
// string and value preceded by its length as a 4-byte big-endian integer.
func MD5OfMessageAttributes(attrs map[string]MessageAttribute) string {
	if len(attrs) == 0 {
		return ""
	}
	names := make([]string, 0, len(attrs))
	for n := range attrs {
		names = append(names, n)
	}
	sort.Strings(names)
	h := md5.New()
	var lb [4]byte
	put := func(b []byte) {
		binary.BigEndian.PutUint32(lb[:], uint32(len(b)))
		h.Write(lb[:])
		h.Write(b)
	}
	for _, n := range names {
		a := attrs[n]
		put([]byte(n))
		put([]byte(a.DataType))
		if a.isBinary() {
			h.Write([]byte{2})
			put(a.BinaryValue)
		} else {
			h.Write([]byte{1})
			put([]byte(a.StringValue))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}
