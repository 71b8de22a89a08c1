# Drawn by `kvtier report`; redraw from this folder with: gnuplot save_drops.gp
set terminal svg size 900,520 dynamic background rgb 'white' font 'sans,12'
set output 'save_drops.svg'
set termoption noenhanced
set title 'Saves dropped against the target rate'
set xlabel 'target rate (GB/s)'
set ylabel 'saves dropped'
set grid
set key below
set yrange [0:*]
$d0 << EOD
1.17938 0
1.47422 0
1.62164 0
1.76907 35
2.35876 159
4.71751 711
EOD
$d1 << EOD
1.17938 0
1.47422 0
1.62164 2
1.76907 20
2.35876 167
4.71751 738
EOD
$d2 << EOD
1.17938 0
1.47422 0
1.62164 15
1.76907 42
2.35876 170
4.71751 764
EOD
$d3 << EOD
1.17938 0
1.47422 0
1.62164 0
1.76907 29
2.35876 195
4.71751 757
EOD
$d4 << EOD
1.17938 0
1.76907 0
1.91649 21
2.06391 44
2.35876 122
4.71751 710
EOD
$d5 << EOD
1.17938 0
1.47422 0
1.62164 0
1.76907 69
2.35876 206
4.71751 732
EOD
plot $d0 using 1:2 with linespoints lw 2 pt 7 lc 1 dt 1 title 'dropped: file:///work/benchdir-save, llama-3.1-8b (save-file-after-1202.json)', \
     $d1 using 1:2 with linespoints lw 2 pt 7 lc 2 dt 1 title 'dropped: file:///work/benchdir-save, llama-3.1-8b (save-file-after.json)', \
     $d2 using 1:2 with linespoints lw 2 pt 7 lc 3 dt 1 title 'dropped: file:///work/benchdir-save, llama-3.1-8b (save-file-before-1201.json)', \
     $d3 using 1:2 with linespoints lw 2 pt 7 lc 4 dt 1 title 'dropped: file:///work/benchdir-save, llama-3.1-8b (save-file-before.json)', \
     $d4 using 1:2 with linespoints lw 2 pt 7 lc 5 dt 1 title 'dropped: fs:///work/benchdir-save, llama-3.1-8b (save-fs-after.json)', \
     $d5 using 1:2 with linespoints lw 2 pt 7 lc 6 dt 1 title 'dropped: fs:///work/benchdir-save, llama-3.1-8b (save-fs-before.json)'
