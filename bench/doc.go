// Package bench measures how fast controllers converge.
package bench
