package gpumem

import "strconv"

// Thousands writes n with a comma between groups of three digits, as
// published parameter counts are written: 6,738,415,616; -1,024; 999.
func Thousands(n int64) string {
	var buf [27]byte // 19 digits, 6 commas, a sign
	return string(appendThousands(buf[:0], n))
}

func appendThousands(dst []byte, n int64) []byte {
	var digits [20]byte
	s := strconv.AppendInt(digits[:0], n, 10)
	if n < 0 {
		dst = append(dst, '-')
		s = s[1:]
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, c)
	}
	return dst
}
