# requests/s versus connections for direct, infergate, nginx, HAProxy (bench/proxy.py)
set terminal pngcairo size 900,560 font "sans,11"
set output "@PNG@"
set title "@TITLE@"
set xlabel "connections (wrk)"
set ylabel "requests/s"
set logscale x 2
set xrange [6:340]
set xtics (8,16,32,64,128,256)
set format y "%.0s%c"
set yrange [0:*]
set grid
set key outside right top
plot "@DAT@" using 1:2 with linespoints lw 2 title "direct (1 sim)", \
     "" using 1:3 with linespoints lw 2 title "infergate", \
     "" using 1:4 with linespoints lw 2 title "nginx", \
     "" using 1:5 with linespoints lw 2 title "HAProxy"
