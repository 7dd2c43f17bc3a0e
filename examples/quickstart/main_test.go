package main

// The README quotes main; cmd/gpumem's docs test checks the quote, and
// this example checks what it prints.
func Example() {
	main()
	// Output: 42 1048576
}
